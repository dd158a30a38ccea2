"""Key names: per queue, with a hash tag so one queue's keys share a Redis Cluster slot."""

from __future__ import annotations


def priority_key(queue: str) -> str:
    return f"queue:{{{queue}}}:priority"


def fifo_key(queue: str) -> str:
    return f"queue:{{{queue}}}:fifo"


def retry_key(queue: str) -> str:
    return f"queue:{{{queue}}}:retry"


def ready_key(queue: str, fifo: bool) -> str:
    return fifo_key(queue) if fifo else priority_key(queue)


def inflight_key(queue: str) -> str:
    """Popped ids not yet acknowledged; score = the epoch second they go back to ready."""
    return f"queue:{{{queue}}}:inflight"


def inflight_places_key(queue: str) -> str:
    """Popped priority ids -> "<score> <member>", so a sweep puts them back in place."""
    return f"queue:{{{queue}}}:inflight:places"


def wake_key(queue: str) -> str:
    """At most one token, pushed when ids arrive: idle workers block on it."""
    return f"queue:{{{queue}}}:wake"


# Temporary keys live at most this long, so a crashed run leaves no lasting garbage.
RECONCILE_KEY_TTL_SECONDS = 3600


def reconcile_members_key(queue: str, token: str) -> str:
    """A run's set snapshot of a FIFO list, for O(1) membership look-ups."""
    return f"queue:{{{queue}}}:reconcile:{token}:members"


def reconcile_staging_key(queue: str, token: str) -> str:
    """A run's sorted set of FIFO ids to restore, ordered by enqueue time."""
    return f"queue:{{{queue}}}:reconcile:{token}:staging"
