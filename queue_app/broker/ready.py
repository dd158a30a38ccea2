"""Ready and waiting ids: apply intents, pop into flight, acknowledge, wait, promote, count."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import redis

from queue_app.broker import scripts
from queue_app.broker.client import is_cluster
from queue_app.broker.keys import (
    fifo_key,
    inflight_key,
    inflight_places_key,
    priority_key,
    ready_key,
    retry_key,
    wake_key,
)
from queue_app.broker.scores import member_job_id


@dataclass(frozen=True)
class Intent:
    """One change to apply: what the relay (or reconciler) reads from an outbox row."""

    # "enqueue" | "schedule" | "remove" (from the ready and retry sets) | "unready" (from the
    # ready set only: a member the job has left while its id waits in the retry set)
    action: str
    job_id: str
    queue: str
    fifo: bool
    score: float | None = None
    # The job's ready-set member (``scores.ready_member``); "" stands for the bare id.
    member: str = ""
    # A FIFO enqueue to the head of the list (a job handed back unstarted), not the tail.
    to_head: bool = False


def apply(client: redis.Redis, intents: Iterable[Intent]) -> None:
    """Apply intents in one pipeline (no MULTI); each is idempotent except FIFO pushes,
    whose duplicates the worker's claim absorbs."""
    pipe = client.pipeline(transaction=False)
    arrived: set[str] = set()
    for intent in intents:
        if intent.action == "enqueue":
            arrived.add(intent.queue)
            pipe.zrem(retry_key(intent.queue), intent.job_id)
            if intent.fifo and intent.to_head:
                pipe.lpush(fifo_key(intent.queue), intent.job_id)
            elif intent.fifo:
                pipe.rpush(fifo_key(intent.queue), intent.job_id)
            else:
                pipe.zadd(priority_key(intent.queue), {intent.member or intent.job_id: intent.score})
        elif intent.action == "schedule":
            _remove_ready(pipe, intent)
            pipe.zadd(retry_key(intent.queue), {intent.job_id: intent.score})
        elif intent.action == "remove":
            _remove_ready(pipe, intent)
            pipe.zrem(retry_key(intent.queue), intent.job_id)
        elif intent.action == "unready":
            _remove_ready(pipe, intent)
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


# Adds ARGV (score, member pairs) to a queue's priority set (KEYS[1]) and leaves one
# wake token (KEYS[2]): all a job enqueued ready needs, in one command.
PUSH_READY_SCRIPT = """
redis.call('ZADD', KEYS[1], unpack(ARGV))
redis.call('LPUSH', KEYS[2], 1)
redis.call('LTRIM', KEYS[2], 0, 0)
"""
# Pairs per script call: Lua's unpack takes a few thousand values at most.
_PUSH_CHUNK = 1000


def push_ready_args(members: Sequence[tuple[float, str]]) -> list[list[float | str]]:
    """The ARGV of each PUSH_READY_SCRIPT call for these (score, member) pairs, a chunk each."""
    return [
        [value for pair in members[start : start + _PUSH_CHUNK] for value in pair]
        for start in range(0, len(members), _PUSH_CHUNK)
    ]


def push_ready(client: redis.Redis, queue: str, members: Sequence[tuple[float, str]]) -> None:
    """Make just-created jobs ready in a priority queue, as (score, member) pairs, and wake a
    worker: one script call per thousand jobs, in one round trip."""
    keys = [priority_key(queue), wake_key(queue)]
    chunks = push_ready_args(members)
    if len(chunks) == 1:
        scripts.run(client, PUSH_READY_SCRIPT, keys, chunks[0])
        return
    scripts.run_many(client, PUSH_READY_SCRIPT, [(keys, args) for args in chunks])


def wake(client: redis.Redis, queue: str) -> None:
    """Leave a wake token for the queue (e.g. when it is resumed)."""
    pipe = client.pipeline(transaction=False)
    _wake(pipe, queue)
    pipe.execute()


def _remove_ready(pipe, intent: Intent) -> None:
    """Take the id out of the priority set, by its member (which the intent names:
    removal is exact, with no scan).

    A FIFO list is left alone: LREM walks the whole list (tens of ms per id on a
    million ids, with Redis blocked for every client). A ``schedule`` is a retry of
    a popped job, so its id is not in the list; a cancelled job's id stays there
    until a pop meets it (the claim drops an id whose job is not queued) or the
    reconciler prunes it.
    """
    pipe.zrem(priority_key(intent.queue), intent.member or intent.job_id)


# How long a popped id may wait for its claim to commit and be acknowledged
# before a sweep puts it back (a duplicate at worst: the claim absorbs it).
INFLIGHT_SECONDS = 5.0


# First drops ARGV[4...] from the in-flight set: (id, token) pairs popped earlier whose
# claim has committed (their acknowledgement rides on the next pop), each only if its
# in-flight entry is still that pop's (see _ACKNOWLEDGE). Then moves up to ARGV[1]
# ready ids into the in-flight set, due back at Redis TIME + ARGV[2] seconds. A
# priority member "<µs>:<id>" pops as its id (the text after the last colon), and its
# score and member are kept so a sweep can put it back in place. FIFO ids get rising
# scores, above every id already in flight: equal scores would sort by id, and a sweep
# would put them back in id order, not in line. Passes the wake token on when ids
# remain, so another idle worker starts.
_RESERVE = """
for i = 4, #ARGV, 2 do
  if redis.call('ZSCORE', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZREM', KEYS[2], ARGV[i])
    redis.call('HDEL', KEYS[3], ARGV[i])
  end
end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[2])
local ids, inflight, places = {}, {}, {}
local step = 0.000001 -- above float64's resolution at epoch seconds until 2106
if ARGV[3] == '1' then
  ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1])) or {}
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if #last > 0 then deadline = math.max(deadline, tonumber(last[2]) + step) end
else
  local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
  for i = 1, #popped, 2 do
    local id = string.match(popped[i], '[^:]*$')
    table.insert(ids, id)
    table.insert(places, id)
    table.insert(places, popped[i + 1] .. ' ' .. popped[i])
  end
end
if #ids == 0 then return {ids, {}} end
for i, id in ipairs(ids) do
  table.insert(inflight, deadline + (i - 1) * step)
  table.insert(inflight, id)
end
redis.call('ZADD', KEYS[2], unpack(inflight))
if #places > 0 then redis.call('HSET', KEYS[3], unpack(places)) end
local left
if ARGV[3] == '1' then left = redis.call('LLEN', KEYS[1]) else left = redis.call('ZCARD', KEYS[1]) end
if left > 0 then
  redis.call('LPUSH', KEYS[4], 1)
  redis.call('LTRIM', KEYS[4], 0, 0)
end
return {ids, redis.call('ZMSCORE', KEYS[2], unpack(ids))}
"""


class Popped(list):
    """Ids a pop moved into flight, in pop order, with each one's pop token (its in-flight
    score as Redis wrote it): an acknowledgement names the pop it is for, so a late one
    cannot remove the entry of a later pop of the same id (another worker's)."""

    def __init__(self, ids: Sequence[str] = (), tokens: Sequence[str] = ()) -> None:
        super().__init__(ids)
        self.tokens = list(tokens)

    def pairs(self) -> list[tuple[str, str]]:
        return list(zip(self, self.tokens, strict=True))


def _popped(reply) -> Popped:
    ids, tokens = reply
    return Popped([_text(i) for i in ids], [_text(t) for t in tokens])


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _reserve_keys(queue: str, fifo: bool) -> list[str]:
    return [ready_key(queue, fifo), inflight_key(queue), inflight_places_key(queue), wake_key(queue)]


def _reserve_args(
    count: int, fifo: bool, acknowledge: Sequence[tuple[str, str]] = ()
) -> list[int | float | str]:
    return [count, INFLIGHT_SECONDS, "1" if fifo else "0", *(part for pair in acknowledge for part in pair)]


def reserve(
    client: redis.Redis, queue: str, fifo: bool, count: int, acknowledge: Sequence[tuple[str, str]] = ()
) -> Popped:
    """Pop up to ``count`` ready ids of one queue into its in-flight set (atomic), after
    acknowledging ``acknowledge`` ((id, pop token) pairs of the queue whose claim
    committed): one round trip."""
    # The hot path: EVALSHA, so the script's text is not sent (and hashed) on every pop.
    args = _reserve_args(count, fifo, acknowledge)
    return _popped(scripts.run(client, _RESERVE, _reserve_keys(queue, fifo), args))


def wait_and_reserve(client: redis.Redis, queue: str, fifo: bool, count: int, timeout: float) -> Popped:
    """``wait_for_work`` on one queue, then ``reserve``, in one round trip (not on a cluster).

    Both commands go out together: Redis holds the pop until the wait ends, then
    runs it at once (a blocked client's next command runs as soon as it is
    served). A woken worker then holds its ids without asking again, a round trip
    nearer its job's start. After a wait that timed out, the pop finds what is there.
    """
    script = scripts.script(client, _RESERVE)
    keys = _reserve_keys(queue, fifo)
    pipe = client.pipeline(transaction=False)
    pipe.blpop([wake_key(queue)], timeout=timeout)
    # EVALSHA by hand: a pipeline running a Script checks that it exists first, a round trip.
    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *_reserve_args(count, fifo))
    _, popped = pipe.execute(raise_on_error=False)
    if isinstance(popped, redis.exceptions.NoScriptError):
        return reserve(client, queue, fifo, count)  # Redis lost its scripts: this call loads it
    if isinstance(popped, Exception):
        raise popped
    return _popped(popped)


# Drops in-flight entries whose claim committed, given as (id, pop token) pairs: only an
# entry still holding that token, the pop's own. Removed by bare id, a late acknowledgement
# could take the entry of a later pop of the same id (handed back and popped by another
# worker meanwhile), which then could not be put back if its claim held it back.
_ACKNOWLEDGE = """
local dropped = 0
for i = 1, #ARGV, 2 do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZREM', KEYS[1], ARGV[i])
    redis.call('HDEL', KEYS[2], ARGV[i])
    dropped = dropped + 1
  end
end
return dropped
"""


def acknowledge(client: redis.Redis, popped: dict[str, Sequence[tuple[str, str]]]) -> None:
    """Drop acknowledged pops (queue -> (id, pop token) pairs) from the in-flight sets:
    their claim committed."""
    calls = [
        ([inflight_key(queue), inflight_places_key(queue)], [part for pair in pairs for part in pair])
        for queue, pairs in popped.items()
        if pairs
    ]
    if calls:
        scripts.run_many(client, _ACKNOWLEDGE, calls)


# Lua shared by the two scripts that return in-flight ids to line: takes ``id`` out
# of the in-flight set (KEYS[2]) and its place hash (KEYS[3]) and, if this call was
# the one to remove it, puts it back in KEYS[1]: a FIFO id (ARGV[1] == '1') at the
# head of its list, a priority id with its old score and member. Returns 1 if moved.
_RETURN_TO_LINE = """
local function return_to_line(id)
  if redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
  local place = redis.call('HGET', KEYS[3], id)
  redis.call('HDEL', KEYS[3], id)
  if ARGV[1] == '1' then
    redis.call('LPUSH', KEYS[1], id)
  elseif place then
    local space = string.find(place, ' ', 1, true)
    redis.call('ZADD', KEYS[1], string.sub(place, 1, space - 1), string.sub(place, space + 1))
  else
    redis.call('ZADD', KEYS[1], 0, id)
  end
  return 1
end
"""

# Puts the given in-flight ids back where they were popped from (in their order),
# without a wake token: the queue is paused or full, so waking a worker would only
# spin. An id no longer in flight (a sweep already returned it) is left alone.
_PUT_BACK = (
    _RETURN_TO_LINE
    + """
local moved = 0
for i = #ARGV, 2, -1 do
  moved = moved + return_to_line(ARGV[i])
end
return moved
"""
)


def put_back(client: redis.Redis, queue: str, fifo: bool, ids: Sequence[str]) -> int:
    """Return popped ids the claim held back (paused or full queue) to their place in line."""
    if not ids:
        return 0
    keys = (ready_key(queue, fifo), inflight_key(queue), inflight_places_key(queue))
    return scripts.run(client, _PUT_BACK, keys, ["1" if fifo else "0", *ids])


def wait_for_work(client: redis.Redis, queues: Sequence[str], timeout: float) -> bool:
    """Block up to ``timeout`` for a wake token of any of ``queues`` (no busy polling)."""
    keys = [wake_key(queue) for queue in queues]
    if not is_cluster(client) or len(keys) == 1:
        return client.blpop(keys, timeout=timeout) is not None
    # A cluster refuses a BLPOP across slots, and each queue has its own: take any token
    # already there, else block on each queue's key in turn for a share of the timeout.
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.lpop(key)
    if any(token is not None for token in pipe.execute()):
        return True
    share = timeout / len(keys)
    return any(client.blpop([key], timeout=share) is not None for key in keys)


# Puts in-flight ids whose deadline passed back where they were popped from. Only
# ids this call removed from the in-flight set move, so two sweepers never both do.
# The last popped go first (FIFO ids each to the head of the list), also across
# calls when more than ARGV[2] expired: the first popped end up first in line.
_RETURN_EXPIRED = (
    _RETURN_TO_LINE
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ids = redis.call('ZREVRANGEBYSCORE', KEYS[2], now, '-inf', 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
for _, id in ipairs(ids) do
  moved = moved + return_to_line(id)
end
if moved > 0 then
  redis.call('LPUSH', KEYS[4], 1)
  redis.call('LTRIM', KEYS[4], 0, 0)
end
return moved
"""
)


def return_expired(client: redis.Redis, queue: str, fifo: bool, limit: int = 1000) -> int:
    """Put popped ids never acknowledged (their worker died) back in the ready structure."""
    keys = (ready_key(queue, fifo), inflight_key(queue), inflight_places_key(queue), wake_key(queue))
    return scripts.run(client, _RETURN_EXPIRED, keys, ["1" if fifo else "0", limit])


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
    return list(scripts.run(client, _TAKE_DUE, [retry_key(queue)], [limit]))


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


# The first member of each priority value in use, in pop order: each step jumps
# past the current score, so the walk costs one look-up per value, not per id.
_HEADS = """
local heads = {}
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
while #head > 0 do
  table.insert(heads, head[1])
  head = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. head[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
end
return heads
"""


def ready_heads(client: redis.Redis, queues: Sequence[tuple[str, bool]]) -> list[str]:
    """The id first in line for each priority value of each priority set, and at the head of each FIFO list.

    Ids are in enqueue order within one priority value and within a list, so
    the oldest ready id of a queue is one of these: a look-up of a few ids
    instead of a scan of every queued job.
    """
    # One script call per queue (each a single key, so a cluster routes it), then the
    # list heads in one pipeline.
    heads = [
        member_job_id(member)
        for queue, _ in queues
        for member in scripts.run(client, _HEADS, [priority_key(queue)])
    ]
    pipe = client.pipeline(transaction=False)
    for queue, _ in queues:
        pipe.lindex(fifo_key(queue), 0)
    heads.extend(head for head in pipe.execute() if head is not None)
    return heads
