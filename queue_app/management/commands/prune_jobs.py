"""Delete finished jobs (and their logs) older than an age: the queue's retention."""

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from queue_app.engine.retention import prune_finished_jobs
from queue_app.management.options import queue_names
from queue_app.states import Status

FINISHED = [Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.EXPIRED]
MAX_AGE_DAYS = 36500  # a hundred years


class Command(BaseCommand):
    help = (
        "Delete completed, failed, cancelled and expired jobs, with their log and outbox rows, "
        "finished more than an age ago. Queued and running jobs are never touched."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--min-age-days",
            type=float,
            default=14,
            help="delete jobs finished more than this many days ago (default 14)",
        )
        parser.add_argument(
            "--failed-min-age-days",
            type=float,
            help="age for failed, cancelled and expired jobs, when it differs (default: --min-age-days)",
        )
        parser.add_argument(
            "--status",
            default=",".join(FINISHED),
            help="comma-separated finished statuses to prune (default: completed,failed,cancelled,expired)",
        )
        parser.add_argument("--queue", help="comma-separated queues (default: all)")
        parser.add_argument("--backend", help="only jobs enqueued through this django.tasks backend alias")
        parser.add_argument("--batch-size", type=int, default=1000, help="jobs per DELETE (default 1000)")
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be deleted, delete nothing"
        )

    def handle(self, *args, **options):
        statuses = [s.strip() for s in options["status"].split(",") if s.strip()]
        wrong = [s for s in statuses if s not in FINISHED]
        if wrong or not statuses:
            given = ", ".join(wrong) or "none given"
            raise CommandError(f"--status: {given}; choose from {', '.join(FINISHED)}")
        queues = None if options["queue"] is None else queue_names("--queue", options["queue"])
        min_age = options["min_age_days"]
        failed_age = options["failed_min_age_days"]
        failed_age = min_age if failed_age is None else failed_age
        for option, days in (("--min-age-days", min_age), ("--failed-min-age-days", failed_age)):
            # NaN fails every comparison; a larger age would reach before year 1 (OverflowError).
            if not 0 <= days <= MAX_AGE_DAYS:
                raise CommandError(f"{option} must be from 0 to {MAX_AGE_DAYS} days, not {days:g}")
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        # A mistyped alias matches no job: the run would report success having deleted nothing.
        if options["backend"] is not None and options["backend"] not in settings.TASKS:
            raise CommandError(
                f"--backend: unknown backend {options['backend']!r}; configured: {', '.join(settings.TASKS)}"
            )
        now = timezone.now()
        ages = {
            Status.COMPLETED: min_age,
            Status.FAILED: failed_age,
            Status.CANCELLED: failed_age,
            Status.EXPIRED: failed_age,
        }
        counts = prune_finished_jobs(
            finished_before={s: now - timedelta(days=ages[s]) for s in statuses},
            queues=queues,
            backend=options["backend"],
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
            report=self._report,
        )
        verb = "would delete" if options["dry_run"] else "deleted"
        for status, count in counts.items():
            self.stdout.write(f"{verb} {count} {status} job(s)")

    def _report(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()  # seen as it happens, also when stdout is a file or a pipe
