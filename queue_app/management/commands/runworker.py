"""Run worker processes that claim and run jobs."""

from django.core.management.base import BaseCommand, CommandError

from queue_app.conf import queue_settings
from queue_app.observability.exporter import serve_metrics
from queue_app.runtime.supervisor import Supervisor, default_name


class Command(BaseCommand):
    help = "Run N worker processes: pop ids from Redis, claim jobs in PostgreSQL, run them."

    def add_arguments(self, parser):
        parser.add_argument("--queues", help="comma-separated queue names (default: all configured)")
        parser.add_argument("--concurrency", type=int, default=1, help="worker processes (default 1)")
        parser.add_argument("--burst", action="store_true", help="exit when no queued job is left")
        parser.add_argument(
            "--name",
            help="worker identity (default host:pid). Restarting with the same name settles the "
            "jobs the previous process held at once instead of after their lease; "
            "never run two workers with one name.",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve these processes' Prometheus counters on this port (for hosts without the web)",
        )

    def handle(self, *args, queues=None, concurrency=1, burst=False, name=None, metrics_port=None, **options):
        configured = queue_settings().QUEUES
        selected = [q.strip() for q in queues.split(",") if q.strip()] if queues else list(configured)
        unknown = [q for q in selected if q not in configured]
        if unknown:
            raise CommandError(
                f"--queues: unknown queue(s) {', '.join(unknown)}; configured: {', '.join(configured)}"
            )
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        if metrics_port is not None:
            if not 0 < metrics_port < 65536:
                raise CommandError("--metrics-port must be between 1 and 65535")
            serve_metrics(metrics_port)
        supervisor = Supervisor(
            name=name or default_name(), queues=selected, concurrency=concurrency, burst=burst
        )
        supervisor.run()
