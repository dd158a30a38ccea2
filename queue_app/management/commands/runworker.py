"""Run worker processes that claim and run jobs."""

from django.core.management.base import BaseCommand, CommandError

from queue_app.conf import queue_settings
from queue_app.management.options import queue_names
from queue_app.observability.exporter import serve_metrics
from queue_app.runtime.supervisor import Supervisor, default_name
from queue_app.runtime.worker_name import WorkerNameInUse


class Command(BaseCommand):
    help = "Run N worker processes: pop ids from Redis, claim jobs in PostgreSQL, run them."

    def add_arguments(self, parser):
        parser.add_argument("--queues", help="comma-separated queue names (default: all configured)")
        parser.add_argument("--concurrency", type=int, default=1, help="worker processes (default 1)")
        parser.add_argument(
            "--slots",
            type=int,
            help="async and io_bound jobs each process runs at once (default: WORKER_SLOTS, 1)",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="exit when no job of these queues is due (jobs scheduled later do not keep it running)",
        )
        parser.add_argument(
            "--with-scheduled",
            action="store_true",
            help="with --burst: also wait for queued jobs scheduled later (retries, run_at)",
        )
        parser.add_argument(
            "--name",
            help="worker identity (default host:pid). Restarting with the same name settles the "
            "jobs the previous process held at once instead of after their lease. "
            "A second worker with a name already running is refused.",
        )
        parser.add_argument(
            "--max-jobs",
            type=int,
            help="replace each worker process after it has started this many jobs "
            "(its jobs settled first), so memory a handler leaks is given back",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve these processes' Prometheus counters on this port (for hosts without the web)",
        )

    def handle(
        self,
        *args,
        queues=None,
        concurrency=1,
        burst=False,
        with_scheduled=False,
        name=None,
        metrics_port=None,
        slots=None,
        max_jobs=None,
        **options,
    ):
        selected = list(queue_settings().QUEUES) if queues is None else queue_names("--queues", queues)
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        if slots is not None and slots < 1:
            raise CommandError("--slots must be at least 1")
        if max_jobs is not None and max_jobs < 1:
            raise CommandError("--max-jobs must be at least 1")
        if with_scheduled and not burst:
            raise CommandError("--with-scheduled only applies with --burst")
        if metrics_port is not None:
            if not 0 < metrics_port < 65536:
                raise CommandError("--metrics-port must be between 1 and 65535")
            try:
                serve_metrics(metrics_port)
            except OSError as exc:  # e.g. the port is in use
                raise CommandError(f"--metrics-port {metrics_port}: {exc.strerror}") from None
        supervisor = Supervisor(
            name=name or default_name(),
            queues=selected,
            concurrency=concurrency,
            burst=burst,
            with_scheduled=with_scheduled,
            slots=slots,
            max_jobs=max_jobs,
        )
        try:
            supervisor.run()
        except WorkerNameInUse:
            raise CommandError(
                f"--name: a worker named {supervisor.name!r} is already running; "
                "stop it first, or give this one another name"
            ) from None
