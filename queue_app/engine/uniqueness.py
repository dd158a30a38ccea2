"""Unique jobs: at most one job per owner and unique key in chosen statuses, within a period.

As Oban's ``unique: [period, keys, states]`` and BullMQ's deduplication: an
enqueue whose key is held returns the job holding it instead of making
another. A job holds its key while its status is one of the request's
``unique_states`` (default ``DEFAULT_UNIQUE_STATES``: queued or running) and,
with ``unique_for``, only if it was created less than that many seconds ago.
Adding ``completed`` makes it "at most once per period". The incoming
request's period and statuses decide, as in Oban; a key is its owner's (jobs
without an owner share one scope), as idempotency keys are. A request whose
idempotency key has a job is answered by that key first (the same job, or a
conflict). In one call, a request's new job holds its key for the later
requests of the call whose statuses include ``queued``.

Why a lock and not a unique index: the statuses and the period differ per
request, and a period is a time comparison no index predicate can hold
(``now()`` is not immutable), so no partial index states the rule. Instead,
every enqueue of a unique job takes a transaction-scoped advisory lock per
(owner, key) before it looks for the key's job, and keeps it until its
transaction ends, by which time its own job is committed (or gone). The
look-up runs as a statement of its own after the lock statement: in READ
COMMITTED each statement takes a new snapshot, so it sees every job a
previous holder of the lock committed. (In one statement, the snapshot would
be older than the lock and miss it.) A key is free again as soon as its job
leaves the statuses, or its period ends: nothing has to release it.

What the lock does not cover: a manual retry (failed or cancelled back to
queued) does not look at keys, so it may queue a second job with a key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connection

from queue_app.engine import sql
from queue_app.exceptions import InvalidJob
from queue_app.payloads import check_json
from queue_app.states import DEFAULT_UNIQUE_STATES, Status

if TYPE_CHECKING:
    from queue_app.models import Job

# The first key of every unique-key advisory lock (the second: a hash of owner and key).
UNIQUE_LOCK_CLASS = 0x554E4951
MAX_UNIQUE_KEY_LENGTH = 255
# Long enough for any "at most once per ..." rule; None means no period at all.
MAX_UNIQUE_FOR_SECONDS = 10 * 366 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Uniqueness:
    """A request's unique key, with the statuses and the period (seconds, or None) it holds in."""

    key: str
    states: frozenset[str]
    seconds: float | None

    def holds_while_queued(self) -> bool:
        """Whether a job just created (queued, created now) would hold this key."""
        return Status.QUEUED in self.states


def checked_uniqueness(key: Any, seconds: Any, states: Any) -> Uniqueness | None:
    """The request's uniqueness, or None without a key; InvalidJob names the field at fault."""
    if key is None:
        for name, value in (("unique_for", seconds), ("unique_states", states)):
            if value is not None:
                raise InvalidJob("needs a unique_key", field=name)
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_UNIQUE_KEY_LENGTH:
        raise InvalidJob(f"must be 1 to {MAX_UNIQUE_KEY_LENGTH} characters", field="unique_key")
    check_json(key, field="unique_key", max_bytes=1024, max_depth=1)
    if seconds is not None:
        # Compared before float(): float() of a huge integer overflows.
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not 0 < seconds <= MAX_UNIQUE_FOR_SECONDS
            or math.isnan(seconds)
        ):
            raise InvalidJob(
                f"must be a number of seconds above 0, at most {MAX_UNIQUE_FOR_SECONDS}", field="unique_for"
            )
        seconds = float(seconds)
    return Uniqueness(key, _checked_states(states), seconds)


def _checked_states(states: Any) -> frozenset[str]:
    if states is None:
        return DEFAULT_UNIQUE_STATES
    rule = f"must be a non-empty list of statuses ({', '.join(Status.values)})"
    # A string is iterable too: "queued" would read as six one-letter statuses.
    if not isinstance(states, (list, tuple, set, frozenset)) or not states:
        raise InvalidJob(rule, field="unique_states")
    if not all(isinstance(state, str) and state in Status.values for state in states):
        raise InvalidJob(rule, field="unique_states")
    return frozenset(Status(state).value for state in states)


def _scope(owner) -> str:
    """The owner part of a key's lock: jobs without an owner share one scope."""
    return "" if owner is None else str(owner.pk)


def lock_and_find(owner, wanted: Sequence[tuple[int, Uniqueness]]) -> dict[int, Job]:
    """Lock the keys of ``wanted`` (position, uniqueness) until the transaction ends, then
    return by position the newest job of the owner holding each key, for those held.

    Must run inside a transaction (the caller's or one ``enqueue_jobs`` opens), before
    the jobs are inserted, and at READ COMMITTED: a transaction whose snapshot is older
    than the locks could not see the job of the lock's previous holder.
    """
    # Imported here: the checks above also serve @task, at import time, before the app
    # registry is ready (queue_app.tasks_backend).
    from queue_app.models import Job

    keys = sorted({uniqueness.key for _, uniqueness in wanted})
    with connection.cursor() as cursor:
        cursor.execute(
            sql.query("lock_unique_keys"),
            {"lock_class": UNIQUE_LOCK_CLASS, "scope": _scope(owner), "keys": keys},
        )
        isolation, _locked = cursor.fetchone()
    if isolation != "read committed":
        raise InvalidJob(
            f"unique jobs need a READ COMMITTED transaction, not {isolation.upper()}", field="unique_key"
        )
    requests = [
        {"position": position, "key": u.key, "states": sorted(u.states), "seconds": u.seconds}
        for position, u in wanted
    ]
    found = Job.objects.raw(
        sql.query("find_unique_jobs"),
        {"requests": json.dumps(requests), "owner_id": getattr(owner, "pk", None)},
    )
    return {job.unique_position: job for job in found}
