"""Ready and waiting ids: apply intents, pop, wait, promote due ids, count."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import redis

from queue_app.broker.keys import fifo_key, priority_key, retry_key
from queue_app.broker.scores import TIER_SPAN


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
    for intent in intents:
        if intent.action == "enqueue":
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
    pipe.execute()


def _remove_ready(pipe, queue: str, job_id: str) -> None:
    pipe.zrem(priority_key(queue), job_id)
    pipe.lrem(fifo_key(queue), 0, job_id)


def pop_ready(client: redis.Redis, queues: Sequence[tuple[str, bool]], count: int) -> list[str]:
    """Pop up to ``count`` ids without blocking: priority sets first, then FIFO lists."""
    ids: list[str] = []
    for queue, fifo in sorted(queues, key=lambda q: q[1]):
        want = count - len(ids)
        if want <= 0:
            break
        if fifo:
            ids.extend(client.lpop(fifo_key(queue), want) or [])
        else:
            ids.extend(member for member, _ in client.zpopmin(priority_key(queue), want))
    return ids


def wait_ready(client: redis.Redis, queues: Sequence[tuple[str, bool]], timeout: float) -> list[str]:
    """Block up to ``timeout`` for one id (no busy polling)."""
    zsets = [priority_key(q) for q, fifo in queues if not fifo]
    lists = [fifo_key(q) for q, fifo in queues if fifo]
    # Split the wait when a worker serves both kinds; each side still blocks.
    share = timeout / 2 if zsets and lists else timeout
    if zsets:
        popped = client.bzpopmin(zsets, timeout=share)
        if popped:
            return [popped[1]]
    if lists:
        popped = client.blpop(lists, timeout=share)
        if popped:
            return [popped[1]]
    return []


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


def ready_heads(client: redis.Redis, queues: Sequence[tuple[str, bool]], tiers: Iterable[int]) -> list[str]:
    """The id first in line in each tier of each priority set and at the head of each FIFO list.

    Ids are in enqueue order within a tier and within a list, so the oldest
    ready id of a queue is one of these: a look-up of a few ids instead of a
    scan of every queued job.
    """
    tiers = list(tiers)
    pipe = client.pipeline(transaction=False)
    for queue, _ in queues:
        for tier in tiers:
            pipe.zrangebyscore(priority_key(queue), tier * TIER_SPAN, f"({(tier + 1) * TIER_SPAN}", 0, 1)
        pipe.lindex(fifo_key(queue), 0)
    heads: list[str] = []
    for answer in pipe.execute():
        if isinstance(answer, list):
            heads.extend(answer)
        elif answer is not None:
            heads.append(answer)
    return heads
