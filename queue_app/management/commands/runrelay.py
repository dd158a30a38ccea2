"""Copy outbox rows to Redis until stopped."""

import signal

from django.core.management.base import BaseCommand, CommandError

from queue_app.management.options import seconds
from queue_app.runtime.outages import STORE_ERRORS
from queue_app.runtime.relay import Relay


class Command(BaseCommand):
    help = "Relay outbox rows to Redis (at least once). Several relays may run at once."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, help="rows per batch (JOBQUEUE RELAY_BATCH_SIZE)")
        parser.add_argument("--poll", type=float, help="seconds between polls when no NOTIFY arrives")
        parser.add_argument("--once", action="store_true", help="drain the outbox once and exit")

    def handle(self, *args, batch_size=None, poll=None, once=False, **options):
        # Checked here: the relay reads 0 as "use the setting" and fails on a negative value.
        if batch_size is not None and batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if poll is not None:
            seconds("--poll", poll)
        relay = Relay(batch_size=batch_size, poll_seconds=poll)

        def stop(signum, frame):
            relay.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            relay.run(once=once)
        except STORE_ERRORS as exc:  # only with --once; otherwise the relay waits for the store
            raise CommandError(f"relay failed, a store is unreachable: {type(exc).__name__}: {exc}") from None
        self.stdout.write(f"relay stopped: {relay.dispatched_total} outbox rows dispatched")
