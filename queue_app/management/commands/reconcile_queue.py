"""Make Redis agree with PostgreSQL: restore missing ids, remove stale ones, rescue expired leases."""

import signal

from django.core.management.base import BaseCommand, CommandError

from queue_app.management.options import seconds
from queue_app.observability.exporter import serve_metrics
from queue_app.runtime.outages import STORE_ERRORS
from queue_app.runtime.reconciler import Reconciler


class Command(BaseCommand):
    help = (
        "Rebuild Redis from PostgreSQL: re-add queued jobs missing from Redis, remove ids whose job "
        "is gone or no longer queued, and requeue (or fail) jobs whose lease expired. Prints a "
        "one-line summary per run."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
        parser.add_argument("--loop", action="store_true", help="keep running, one pass every --interval")
        parser.add_argument(
            "--interval", type=float, default=60.0, help="seconds between passes with --loop (default 60)"
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            help="jobs per page and ids per Redis chunk (default RECONCILE_BATCH_SIZE)",
        )
        parser.add_argument(
            "--metrics-port", type=int, help="with --loop: serve its Prometheus counters on this port"
        )

    def handle(
        self, *args, dry_run=False, loop=False, interval=60.0, batch_size=None, metrics_port=None, **options
    ):
        seconds("--interval", interval)
        if batch_size is not None and batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if metrics_port is not None and not (loop and 0 < metrics_port < 65536):
            raise CommandError("--metrics-port needs --loop and a port between 1 and 65535")
        reconciler = Reconciler(dry_run=dry_run, batch_size=batch_size, report=self.stdout.write)
        if not loop:
            try:
                reconciler.run_once()
            except STORE_ERRORS as exc:
                raise CommandError(f"reconcile failed, a store is unreachable: {type(exc).__name__}: {exc}")
            return
        if metrics_port is not None:
            try:
                serve_metrics(metrics_port)
            except OSError as exc:  # e.g. the port is in use
                raise CommandError(f"--metrics-port {metrics_port}: {exc.strerror}") from None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: reconciler.stop())
        reconciler.run_forever(interval)
