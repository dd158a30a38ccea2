"""The reconciler's operations: membership look-ups, snapshots, scans, add-only restores.

Temporary keys are named in ``keys`` and expire after
``RECONCILE_KEY_TTL_SECONDS``, so a crashed run leaves no lasting garbage.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

import redis

from queue_app.broker import scripts
from queue_app.broker.keys import (
    RECONCILE_KEY_TTL_SECONDS,
    fifo_key,
    priority_key,
    reconcile_members_key,
    reconcile_restored_key,
    reconcile_staging_key,
    retry_key,
)
from queue_app.broker.ready import Intent


@dataclass(frozen=True)
class Lookup:
    """Which of ``ids`` are members of ``key`` (a sorted set, or a plain set).

    For a priority set, ask by member (``scores.ready_member``), not by bare id.
    """

    key: str
    ids: Sequence[str]
    sorted_set: bool = True


def contains(client: redis.Redis, lookups: Sequence[Lookup]) -> list[list[bool]]:
    """Membership of many ids in many keys in one round trip (ZMSCORE / SMISMEMBER)."""
    pipe = client.pipeline(transaction=False)
    asked = [lookup for lookup in lookups if lookup.ids]
    for lookup in asked:
        if lookup.sorted_set:
            pipe.zmscore(lookup.key, list(lookup.ids))
        else:
            pipe.smismember(lookup.key, list(lookup.ids))
    answers = iter(pipe.execute() if asked else [])
    results = []
    for lookup in lookups:
        if not lookup.ids:
            results.append([])
        elif lookup.sorted_set:
            results.append([score is not None for score in next(answers)])
        else:
            results.append([bool(member) for member in next(answers)])
    return results


# Copies one chunk of a list into a set, server-side (ids never cross the network).
_SNAPSHOT_CHUNK = """
local start = tonumber(ARGV[1])
local ids = redis.call('LRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
if #ids > 0 then
  redis.call('SADD', KEYS[2], unpack(ids))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
end
return #ids
"""


def snapshot_list(client: redis.Redis, list_key: str, set_key: str, *, chunk: int = 1000) -> int:
    """Copy a list into a set in chunks (each atomic, none long enough to stall Redis).

    Pops and pushes between chunks shift the offsets, so an id may be missed:
    the caller then sees it as absent, which errs toward a harmless duplicate.
    """
    start = 0
    while True:
        copied = scripts.run(
            client, _SNAPSHOT_CHUNK, [list_key, set_key], [start, chunk, RECONCILE_KEY_TTL_SECONDS]
        )
        start += copied
        if copied < chunk:
            return start


def scan_sorted_set(client: redis.Redis, key: str, *, chunk: int = 1000) -> Iterator[list[str]]:
    """Members in chunks (ZSCAN): each member present throughout is seen at least once."""
    cursor = 0
    while True:
        cursor, members = client.zscan(key, cursor, count=chunk)
        if members:
            yield [member for member, _ in members]
        if cursor == 0:
            return


def prune_sorted_set(
    client: redis.Redis,
    key: str,
    pick: Callable[[list[str]], Collection[str]],
    *,
    chunk: int = 1000,
    remove: bool = True,
) -> int:
    """Scan ``key`` in chunks and remove the members ``pick`` returns; returns how many went."""
    removed = 0
    for members in scan_sorted_set(client, key, chunk=chunk):
        doomed = list(pick(members))
        if doomed and remove:
            removed += client.zrem(key, *doomed)
    return removed


def restore(client: redis.Redis, intents: Iterable[Intent], *, staging_token: str) -> None:
    """Add-only counterpart of ``apply`` for ids known to be missing (no O(N) LREMs).

    One ZADD per key. Ready ids of FIFO queues go to the run's staging set
    instead of the list, so ``release_staged`` can put them in line in enqueue order.
    """
    by_key: dict[str, dict[str, float]] = {}
    staged: set[str] = set()
    for intent in intents:
        member = intent.job_id
        if intent.action == "enqueue" and intent.fifo:
            key = reconcile_staging_key(intent.queue, staging_token)
            staged.add(key)
        elif intent.action == "enqueue":
            key = priority_key(intent.queue)
            member = intent.member or intent.job_id
        elif intent.action == "schedule":
            key = retry_key(intent.queue)
        else:
            raise ValueError(f"cannot restore action {intent.action!r}")
        by_key.setdefault(key, {})[member] = intent.score
    pipe = client.pipeline(transaction=False)
    for key, members in by_key.items():
        pipe.zadd(key, members)
    for key in staged:
        pipe.expire(key, RECONCILE_KEY_TTL_SECONDS)
    pipe.execute()


# Moves the lowest-scored chunk of the staging set to the tail of the run's restored list.
_RELEASE_CHUNK = """
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ids))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
end
return #ids
"""

# Puts the restored list (KEYS[1]) in front of the FIFO list (KEYS[2]) in one step, by
# moving the shorter one onto the other: O(the shorter), never a walk of a long list.
_PREPEND = """
local restored, waiting = redis.call('LLEN', KEYS[1]), redis.call('LLEN', KEYS[2])
if restored == 0 then return 0 end
if restored <= waiting then
  for _ = 1, restored do redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') end
else
  for _ = 1, waiting do redis.call('LMOVE', KEYS[2], KEYS[1], 'LEFT', 'RIGHT') end
  redis.call('RENAME', KEYS[1], KEYS[2])
  redis.call('PERSIST', KEYS[2])
end
return restored
"""


def release_staged(client: redis.Redis, queue: str, staging_token: str, *, chunk: int = 1000) -> int:
    """Put a run's staged FIFO ids at the head of the queue's list in enqueue order; returns how many.

    They were enqueued before the ids pushed since they went missing (after a Redis loss,
    every id in the list), so they go first. Chunks build the run's own list, then one
    script puts it in front: no pop sees a restored id before an older one is in line.
    """
    staging = reconcile_staging_key(queue, staging_token)
    restored = reconcile_restored_key(queue, staging_token)
    release = [chunk, RECONCILE_KEY_TTL_SECONDS]
    while scripts.run(client, _RELEASE_CHUNK, [staging, restored], release) == chunk:
        pass
    return scripts.run(client, _PREPEND, [restored, fifo_key(queue)])


def discard_reconcile_keys(client: redis.Redis, queue: str, token: str) -> None:
    client.delete(
        reconcile_members_key(queue, token),
        reconcile_staging_key(queue, token),
        reconcile_restored_key(queue, token),
    )
