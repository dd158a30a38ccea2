"""The Redis layout, in one place: keys, scores, push, pop and promote. No ORM here.

Per queue, with a hash tag so one queue's keys share a Redis Cluster slot:

    queue:{name}:priority         sorted set of ready ids; score = tier * 2**50 + µs since 2020
    queue:{name}:fifo             list of ready ids (queues configured as strict FIFO)
    queue:{name}:retry            sorted set of waiting ids; score = due epoch seconds
    queue:{name}:inflight         sorted set of popped, not yet acknowledged ids;
                                  score = the epoch second they go back to ready
    queue:{name}:inflight:scores  hash: popped id -> its priority score (to put it back in place)
    queue:{name}:wake             list of at most one token: pushed when ids arrive, so an
                                  idle worker blocks on it (BLPOP) instead of polling

A pop (``reserve``) is never the only copy of an id: one script moves the ids
from the ready structure into the in-flight set with a deadline; the worker
acknowledges them once its claim has committed. A worker that dies in between
leaves them there, and the next sweep (``return_expired``, run by any worker
with its promotion) puts them back where they were.

Redis holds ids only; losing it loses the schedule, never the work.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from django.conf import settings

# Scores: tier * 2**50 + microseconds since EPOCH. 2**50 µs is ~35.7 years, and
# the largest score (3 * 2**50 - 1) stays below 2**53, so every score is an
# exact float64 integer: ordering is exact to the microsecond.
EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
TIER_SPAN = 2**50


def priority_score(tier: int, enqueued_at: datetime) -> float:
    """Exact float64 score: tier first, then enqueue time (µs), clamped to the tier."""
    delta = enqueued_at - EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    micros = min(max(micros, 0), TIER_SPAN - 1)
    return float(tier * TIER_SPAN + micros)


def due_score(due_at: datetime) -> float:
    return due_at.timestamp()


def priority_key(queue: str) -> str:
    return f"queue:{{{queue}}}:priority"


def fifo_key(queue: str) -> str:
    return f"queue:{{{queue}}}:fifo"


def retry_key(queue: str) -> str:
    return f"queue:{{{queue}}}:retry"


def ready_key(queue: str, fifo: bool) -> str:
    return fifo_key(queue) if fifo else priority_key(queue)


def inflight_key(queue: str) -> str:
    return f"queue:{{{queue}}}:inflight"


def inflight_scores_key(queue: str) -> str:
    return f"queue:{{{queue}}}:inflight:scores"


def wake_key(queue: str) -> str:
    return f"queue:{{{queue}}}:wake"


# How long a popped id may wait for its claim to commit and be acknowledged
# before a sweep puts it back (a duplicate at worst: the claim absorbs it).
INFLIGHT_SECONDS = 5.0


_client: redis.Redis | None = None
_client_pid: int | None = None


def get_client() -> redis.Redis:
    """A client per process (re-created after fork), from settings.REDIS_URL."""
    import os

    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = redis.Redis.from_url(
            settings.REDIS_URL,
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=30,
            health_check_interval=30,
        )
        _client_pid = os.getpid()
    return _client


@dataclass(frozen=True)
class Intent:
    """One change to apply: what the relay (or reconciler) reads from an outbox row."""

    action: str  # "enqueue" | "schedule" | "remove"
    job_id: str
    queue: str
    fifo: bool
    score: float | None = None


def apply(client: redis.Redis, intents: Iterable[Intent]) -> None:
    """Apply intents in one pipeline (no MULTI); each is idempotent except FIFO pushes,
    whose duplicates the worker's claim absorbs."""
    pipe = client.pipeline(transaction=False)
    arrived: set[str] = set()
    for intent in intents:
        if intent.action == "enqueue":
            arrived.add(intent.queue)
            pipe.zrem(retry_key(intent.queue), intent.job_id)
            if intent.fifo:
                pipe.rpush(fifo_key(intent.queue), intent.job_id)
            else:
                pipe.zadd(priority_key(intent.queue), {intent.job_id: intent.score})
        elif intent.action == "schedule":
            _remove_ready(pipe, intent.queue, intent.job_id)
            pipe.zadd(retry_key(intent.queue), {intent.job_id: intent.score})
        elif intent.action == "remove":
            _remove_ready(pipe, intent.queue, intent.job_id)
            pipe.zrem(retry_key(intent.queue), intent.job_id)
        else:
            raise ValueError(f"unknown outbox action {intent.action!r}")
    for queue in arrived:
        _wake(pipe, queue)
    pipe.execute()


def _wake(pipe, queue: str) -> None:
    """Leave one token for an idle worker blocked on the queue (more would only
    wake workers to find nothing; the one woken passes the token on)."""
    pipe.lpush(wake_key(queue), 1)
    pipe.ltrim(wake_key(queue), 0, 0)


def _remove_ready(pipe, queue: str, job_id: str) -> None:
    pipe.zrem(priority_key(queue), job_id)
    pipe.lrem(fifo_key(queue), 0, job_id)


# Moves up to ARGV[1] ready ids into the in-flight set, due back at Redis TIME +
# ARGV[2] seconds; a priority id's score is kept so a sweep can put it back in
# place. Passes the wake token on when ids remain, so another idle worker starts.
_RESERVE = """
local t = redis.call('TIME')
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[2])
local ids, inflight, scores = {}, {}, {}
if ARGV[3] == '1' then
  ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1])) or {}
else
  local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
  for i = 1, #popped, 2 do
    table.insert(ids, popped[i])
    table.insert(scores, popped[i])
    table.insert(scores, popped[i + 1])
  end
end
if #ids == 0 then return ids end
for _, id in ipairs(ids) do
  table.insert(inflight, deadline)
  table.insert(inflight, id)
end
redis.call('ZADD', KEYS[2], unpack(inflight))
if #scores > 0 then redis.call('HSET', KEYS[3], unpack(scores)) end
local left
if ARGV[3] == '1' then left = redis.call('LLEN', KEYS[1]) else left = redis.call('ZCARD', KEYS[1]) end
if left > 0 then
  redis.call('LPUSH', KEYS[4], 1)
  redis.call('LTRIM', KEYS[4], 0, 0)
end
return ids
"""


def reserve(client: redis.Redis, queue: str, fifo: bool, count: int) -> list[str]:
    """Pop up to ``count`` ready ids of one queue into its in-flight set (atomic)."""
    keys = (ready_key(queue, fifo), inflight_key(queue), inflight_scores_key(queue), wake_key(queue))
    return list(client.eval(_RESERVE, 4, *keys, count, INFLIGHT_SECONDS, "1" if fifo else "0"))


def acknowledge(client: redis.Redis, popped: dict[str, list[str]]) -> None:
    """Drop acknowledged ids (queue -> ids) from the in-flight sets: their claim committed."""
    pipe = client.pipeline(transaction=False)
    for queue, ids in popped.items():
        if ids:
            pipe.zrem(inflight_key(queue), *ids)
            pipe.hdel(inflight_scores_key(queue), *ids)
    pipe.execute()


def wait_for_work(client: redis.Redis, queues: Sequence[str], timeout: float) -> bool:
    """Block up to ``timeout`` for a wake token of any of ``queues`` (no busy polling)."""
    return client.blpop([wake_key(queue) for queue in queues], timeout=timeout) is not None


# Puts in-flight ids whose deadline passed back where they were popped from: a
# FIFO id at the head of its list, a priority id with its old score. Only ids
# this call removed from the in-flight set move, so two sweepers never both do.
_RETURN_EXPIRED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
for i = #ids, 1, -1 do
  local id = ids[i]
  if redis.call('ZREM', KEYS[2], id) == 1 then
    moved = moved + 1
    local score = redis.call('HGET', KEYS[3], id)
    redis.call('HDEL', KEYS[3], id)
    if ARGV[1] == '1' then
      redis.call('LPUSH', KEYS[1], id)
    else
      redis.call('ZADD', KEYS[1], score or 0, id)
    end
  end
end
if moved > 0 then
  redis.call('LPUSH', KEYS[4], 1)
  redis.call('LTRIM', KEYS[4], 0, 0)
end
return moved
"""


def return_expired(client: redis.Redis, queue: str, fifo: bool, limit: int = 1000) -> int:
    """Put popped ids never acknowledged (their worker died) back in the ready structure."""
    keys = (ready_key(queue, fifo), inflight_key(queue), inflight_scores_key(queue), wake_key(queue))
    return client.eval(_RETURN_EXPIRED, 4, *keys, "1" if fifo else "0", limit)


# Removes due members and returns only those this call removed, so two
# promoters never both move one id. Redis TIME decides what is due.
_TAKE_DUE = """
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1000000
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_s, 'LIMIT', 0, tonumber(ARGV[1]))
local taken = {}
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[1], id) == 1 then table.insert(taken, id) end
end
return taken
"""


def take_due(client: redis.Redis, queue: str, limit: int = 1000) -> list[str]:
    """Remove and return ids whose due time has come (atomic per call)."""
    return list(client.eval(_TAKE_DUE, 1, retry_key(queue), limit))


def depths(client: redis.Redis, queues: Sequence[tuple[str, bool]]) -> dict[str, dict[str, int]]:
    """Number of ids in each structure of each queue."""
    pipe = client.pipeline(transaction=False)
    for queue, _ in queues:
        pipe.zcard(priority_key(queue))
        pipe.llen(fifo_key(queue))
        pipe.zcard(retry_key(queue))
    counts = pipe.execute()
    return {
        queue: {"priority": counts[i * 3], "fifo": counts[i * 3 + 1], "retry": counts[i * 3 + 2]}
        for i, (queue, _) in enumerate(queues)
    }


# --- repair support for the reconciler: look-ups, scans, add-only restores ----

# Temporary keys live at most this long, so a crashed run leaves no lasting garbage.
RECONCILE_KEY_TTL_SECONDS = 3600


def reconcile_members_key(queue: str, token: str) -> str:
    """A run's set snapshot of a FIFO list, for O(1) membership look-ups."""
    return f"queue:{{{queue}}}:reconcile:{token}:members"


def reconcile_staging_key(queue: str, token: str) -> str:
    """A run's sorted set of FIFO ids to restore, ordered by enqueue time."""
    return f"queue:{{{queue}}}:reconcile:{token}:staging"


def enqueue_order_score(enqueued_at: datetime) -> float:
    """Microseconds since EPOCH: the FIFO position of a job (tier 0 of the priority score)."""
    return priority_score(0, enqueued_at)


@dataclass(frozen=True)
class Lookup:
    """Which of ``ids`` are members of ``key`` (a sorted set, or a plain set)."""

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
        copied = client.eval(_SNAPSHOT_CHUNK, 2, list_key, set_key, start, chunk, RECONCILE_KEY_TTL_SECONDS)
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


def prune_list(
    client: redis.Redis,
    key: str,
    pick: Callable[[list[str]], Collection[str]],
    *,
    chunk: int = 1000,
    remove: bool = True,
) -> int:
    """Walk a list in LRANGE chunks and remove every occurrence of the ids ``pick`` returns."""
    start = 0
    removed_total = 0
    while True:
        ids = client.lrange(key, start, start + chunk - 1)
        doomed = list(dict.fromkeys(pick(ids))) if ids else []
        removed = 0
        if doomed and remove:
            pipe = client.pipeline(transaction=False)
            for job_id in doomed:
                pipe.lrem(key, 0, job_id)
            removed = sum(pipe.execute())
            removed_total += removed
        if len(ids) < chunk:
            return removed_total
        # Removals at or before this chunk shift the rest left; stepping back by all
        # of them may re-read a few entries but never skips one.
        start = max(0, start + len(ids) - removed)


def restore(client: redis.Redis, intents: Iterable[Intent], *, staging_token: str) -> None:
    """Add-only counterpart of ``apply`` for ids known to be missing (no O(N) LREMs).

    One ZADD per key. Ready ids of FIFO queues go to the run's staging set
    instead of the list, so ``release_staged`` can append them in enqueue order.
    """
    by_key: dict[str, dict[str, float]] = {}
    staged: set[str] = set()
    for intent in intents:
        if intent.action == "enqueue" and intent.fifo:
            key = reconcile_staging_key(intent.queue, staging_token)
            staged.add(key)
        elif intent.action == "enqueue":
            key = priority_key(intent.queue)
        elif intent.action == "schedule":
            key = retry_key(intent.queue)
        else:
            raise ValueError(f"cannot restore action {intent.action!r}")
        by_key.setdefault(key, {})[intent.job_id] = intent.score
    pipe = client.pipeline(transaction=False)
    for key, members in by_key.items():
        pipe.zadd(key, members)
    for key in staged:
        pipe.expire(key, RECONCILE_KEY_TTL_SECONDS)
    pipe.execute()


# Moves the lowest-scored chunk of the staging set to the list's tail, atomically.
_RELEASE_CHUNK = """
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ids))
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
end
return #ids
"""


def release_staged(client: redis.Redis, queue: str, staging_token: str, *, chunk: int = 1000) -> int:
    """Append a run's staged FIFO ids to the queue's list in enqueue order; returns how many."""
    staging = reconcile_staging_key(queue, staging_token)
    released = 0
    while True:
        moved = client.eval(_RELEASE_CHUNK, 2, staging, fifo_key(queue), chunk)
        released += moved
        if moved < chunk:
            return released


def discard_reconcile_keys(client: redis.Redis, queue: str, token: str) -> None:
    client.delete(reconcile_members_key(queue, token), reconcile_staging_key(queue, token))
