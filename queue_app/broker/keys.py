"""Key names: per queue, with a hash tag so one queue's keys share a Redis Cluster slot.

Every key starts with ``JOBQUEUE['REDIS_KEY_PREFIX']`` (empty by default), so projects
sharing a Redis database each see only their own keys.
"""

from __future__ import annotations

import re

from queue_app.conf import queue_settings


def key_prefix() -> str:
    """What every key the queue writes starts with: JOBQUEUE['REDIS_KEY_PREFIX']."""
    return queue_settings().REDIS_KEY_PREFIX


def _queue_key(queue: str, suffix: str) -> str:
    """``<prefix>queue:{<name>}:<suffix>``: the braces are a literal hash tag (one cluster slot
    per queue); the prefix holds no braces (conf.parse_key_prefix), so it never takes the tag's place."""
    return f"{key_prefix()}queue:{{{queue}}}:{suffix}"


def all_keys_pattern() -> str:
    """A SCAN ``MATCH`` pattern for every key of every queue under this prefix (the prefix's
    own glob characters escaped, so they match only themselves)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", key_prefix()) + "queue:*"


def priority_key(queue: str) -> str:
    return _queue_key(queue, "priority")


def fifo_key(queue: str) -> str:
    return _queue_key(queue, "fifo")


def retry_key(queue: str) -> str:
    return _queue_key(queue, "retry")


def ready_key(queue: str, fifo: bool) -> str:
    return fifo_key(queue) if fifo else priority_key(queue)


def inflight_key(queue: str) -> str:
    """Popped ids not yet acknowledged; score = the epoch second they go back to ready."""
    return _queue_key(queue, "inflight")


def inflight_places_key(queue: str) -> str:
    """Popped priority ids -> "<score> <member>", so a sweep puts them back in place."""
    return _queue_key(queue, "inflight:places")


def wake_key(queue: str) -> str:
    """At most one token, pushed when ids arrive: idle workers block on it."""
    return _queue_key(queue, "wake")


# Temporary keys live at most this long, so a crashed run leaves no lasting garbage.
RECONCILE_KEY_TTL_SECONDS = 3600


def reconcile_members_key(queue: str, token: str) -> str:
    """A run's set snapshot of a FIFO list, for O(1) membership look-ups."""
    return _queue_key(queue, f"reconcile:{token}:members")


def reconcile_staging_key(queue: str, token: str) -> str:
    """A run's sorted set of FIFO ids to restore, ordered by enqueue time."""
    return _queue_key(queue, f"reconcile:{token}:staging")


def reconcile_restored_key(queue: str, token: str) -> str:
    """A run's list of FIFO ids to restore, in enqueue order, put in front of the queue's list at once."""
    return _queue_key(queue, f"reconcile:{token}:restored")


def reconcile_rebuild_key(queue: str, token: str) -> str:
    """A run's pruned copy of a FIFO list, built chunk by chunk and swapped in for it at the end."""
    return _queue_key(queue, f"reconcile:{token}:rebuild")


def reconcile_rebuild_lock_key(queue: str) -> str:
    """Held by the one reconciler rebuilding the queue's FIFO list (its run token as value)."""
    return _queue_key(queue, "reconcile:rebuild-lock")


def reconcile_stale_key(queue: str, token: str) -> str:
    """A run's set of the stale ids found in a FIFO list, which its rebuild drops."""
    return _queue_key(queue, f"reconcile:{token}:stale")
