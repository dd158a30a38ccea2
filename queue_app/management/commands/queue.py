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


# Option -> the handle() keyword argparse gives it, the limit it sets, and its kind.
OPTIONS = {
    "--concurrency": "concurrency",
    "--rate": "rate",
    "--key-concurrency": "key_concurrency",
    "--key-rate": "key_rate",
}
LIMIT_FIELDS = {
    "--concurrency": "concurrency_limit",
    "--rate": "rate_limit",
    "--key-concurrency": "key_concurrency_limit",
    "--key-rate": "key_rate_limit",
}
LIMIT_KINDS = {"--concurrency": int, "--rate": float, "--key-concurrency": int, "--key-rate": float}


class Command(BaseCommand):
    help = (
        "Pause or resume a queue for every worker, set its concurrency and rate limits (also per "
        "concurrency key), "
        "or show the controls of one queue (or of all, with status and no name)."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["pause", "resume", "status", "limit"])
        parser.add_argument("name", nargs="?", help="queue name (status without one shows every queue)")
        parser.add_argument(
            "--concurrency", help="with limit: at most this many jobs of the queue running at once ('none')"
        )
        parser.add_argument("--rate", help="with limit: at most this many claims per second ('none')")
        parser.add_argument(
            "--key-concurrency",
            help="with limit: at most this many jobs of one concurrency key running at once ('none')",
        )
        parser.add_argument(
            "--key-rate", help="with limit: at most this many starts per second per concurrency key ('none')"
        )

    def handle(self, *args, action, name=None, **options):
        given = {option: options.get(field) for option, field in OPTIONS.items()}
        given = {option: value for option, value in given.items() if value is not None}
        if name is None and action != "status":
            raise CommandError(f"{action}: name the queue")
        if action != "limit" and given:
            # Refused, not ignored: the operator would believe a limit was set.
            raise CommandError(
                f"{action}: --concurrency, --rate, --key-concurrency and --key-rate go with limit only"
            )
        if name is not None and name not in queue_settings().QUEUES:
            raise CommandError(
                f"name: unknown queue {name!r}; configured: {', '.join(queue_settings().QUEUES)}"
            )
        if action == "pause":
            services.pause_queue(name)
        elif action == "resume":
            services.resume_queue(name)
        elif action == "limit":
            if not given:
                raise CommandError("limit: give --concurrency and/or --rate (a number, or 'none')")
            limits = {
                LIMIT_FIELDS[option]: _limit(value, LIMIT_KINDS[option], option)
                for option, value in given.items()
            }
            try:
                services.set_queue_limits(name, **limits)
            except services.InvalidQueueControl as exc:
                option = next(o for o, f in LIMIT_FIELDS.items() if f == exc.field)
                # The service speaks JSON's null; this command's word for no limit is 'none'.
                raise CommandError(f"{option}: {exc.message.replace('null', repr('none'))}") from None
        for controls in services.queue_controls([name] if name else None).values():
            line = (
                f"{controls.name}: {'paused' if controls.paused else 'active'}, "
                f"concurrency limit {controls.concurrency_limit or 'none'}, "
                f"rate limit {f'{controls.rate_limit:g}/s' if controls.rate_limit else 'none'}"
            )
            if controls.key_concurrency_limit or controls.key_rate_limit:
                key_rate = f"{controls.key_rate_limit:g}/s" if controls.key_rate_limit else "none"
                line += (
                    f", per key: concurrency limit {controls.key_concurrency_limit or 'none'},"
                    f" rate limit {key_rate}"
                )
            self.stdout.write(line)
