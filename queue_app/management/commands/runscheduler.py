"""Enqueue the jobs of periodic schedules until stopped."""

import signal

from django.core.management.base import BaseCommand

from queue_app.runtime.scheduler import Scheduler


class Command(BaseCommand):
    help = (
        "Enqueue one job per tick of each schedule (JOBQUEUE['SCHEDULES'] and @periodic handlers). "
        "Several schedulers may run at once: each tick still gives one job."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="handle the due ticks once and exit")

    def handle(self, *args, once=False, **options):
        scheduler = Scheduler()
        if once:
            scheduler.run_once()
        else:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: scheduler.stop())
            scheduler.run_forever()
        self.stdout.write(f"scheduler stopped: {scheduler.enqueued_total} jobs enqueued")
