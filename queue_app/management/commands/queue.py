"""Pause, resume, limit or show a queue: ``manage.py queue pause|resume|status|limit NAME``."""

from django.core.management.base import BaseCommand, CommandError

from queue_app import services
from queue_app.conf import queue_settings


def _limit(value: str, kind, option: str):
    """A limit from the command line: a number, or "none" to remove it."""
    if value.lower() == "none":
        return None
    try:
        return kind(value)
    except ValueError:
        raise CommandError(f"{option}: expected a number or 'none', not {value!r}") from None


class Command(BaseCommand):
    help = (
        "Pause or resume a queue for every worker, set its concurrency and rate limits, "
        "or show the controls of one queue (or of all, with status and no name)."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["pause", "resume", "status", "limit"])
        parser.add_argument("name", nargs="?", help="queue name (status without one shows every queue)")
        parser.add_argument(
            "--concurrency", help="with limit: at most this many jobs of the queue running at once ('none')"
        )
        parser.add_argument("--rate", help="with limit: at most this many claims per second ('none')")

    def handle(self, *args, action, name=None, concurrency=None, rate=None, **options):
        if name is None and action != "status":
            raise CommandError(f"{action}: name the queue")
        if action != "limit" and (concurrency is not None or rate is not None):
            # Refused, not ignored: the operator would believe a limit was set.
            raise CommandError(f"{action}: --concurrency and --rate go with limit only")
        if name is not None and name not in queue_settings().QUEUES:
            raise CommandError(
                f"name: unknown queue {name!r}; configured: {', '.join(queue_settings().QUEUES)}"
            )
        if action == "pause":
            services.pause_queue(name)
        elif action == "resume":
            services.resume_queue(name)
        elif action == "limit":
            if concurrency is None and rate is None:
                raise CommandError("limit: give --concurrency and/or --rate (a number, or 'none')")
            limits = {}
            if concurrency is not None:
                limits["concurrency_limit"] = _limit(concurrency, int, "--concurrency")
            if rate is not None:
                limits["rate_limit"] = _limit(rate, float, "--rate")
            try:
                services.set_queue_limits(name, **limits)
            except services.InvalidQueueControl as exc:
                option = "--concurrency" if exc.field == "concurrency_limit" else "--rate"
                # The service speaks JSON's null; this command's word for no limit is 'none'.
                raise CommandError(f"{option}: {exc.message.replace('null', repr('none'))}") from None
        for controls in services.queue_controls([name] if name else None).values():
            self.stdout.write(
                f"{controls.name}: {'paused' if controls.paused else 'active'}, "
                f"concurrency limit {controls.concurrency_limit or 'none'}, "
                f"rate limit {f'{controls.rate_limit:g}/s' if controls.rate_limit else 'none'}"
            )
