"""Copy outbox rows to Redis until stopped."""

import signal

from django.core.management.base import BaseCommand

from queue_app.runtime.relay import Relay


class Command(BaseCommand):
    help = "Relay outbox rows to Redis (at least once). Several relays may run at once."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, help="rows per batch (JOBQUEUE RELAY_BATCH_SIZE)")
        parser.add_argument("--poll", type=float, help="seconds between polls when no NOTIFY arrives")
        parser.add_argument("--once", action="store_true", help="drain the outbox once and exit")

    def handle(self, *args, batch_size=None, poll=None, once=False, **options):
        relay = Relay(batch_size=batch_size, poll_seconds=poll)

        def stop(signum, frame):
            relay.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        relay.run(once=once)
        self.stdout.write(f"relay stopped: {relay.dispatched_total} outbox rows dispatched")
