"""Dropping stale ids from a strict-FIFO list: a rebuild in chunks, never a walk per id.

LREM walks the whole list for every id it removes: after a mass cancel, a million
ids long list and a hundred thousand stale ids mean 10^11 steps with Redis blocked
for every client. Instead a run takes two passes. The first reads the list in
chunks and asks ``pick`` (PostgreSQL) which ids are stale, collecting those in a
set in Redis; when it finds none, that is all. The second builds a pruned copy of
the list with a script per chunk, from the tail toward the head, and swaps it in
with one short script.

The list keeps changing meanwhile: workers pop its head (and put ids back there),
the relay pushes onto its tail, and a hand-back pushes onto its head. So the second
pass first pushes a marker onto the tail (a value no job can have): every id in
front of it keeps its distance to it for as long as it is in the list, because ids
come and go only at the ends. Chunks are read by that distance, and the swap keeps
what was pushed behind the marker (the tail) and whatever is in front of the
rebuilt part (the head), around the pruned copy, in order.

An id read once may be popped before the swap; then the id now at its distance is
another one (or none). Each read checks that the previous chunk's first ids are
still in place, and the swap checks the last chunk's; where they are not, the
rebuild stops short of that chunk and leaves the head as it is (its stale ids go
as the workers pop them: the claim drops an id whose job is not queued). When the
marker itself was popped (the workers emptied the list), nothing is swapped.

A job found stale, then queued again and pushed anew before the second pass began,
loses that entry too (it has the stale id): the next run finds it missing and
restores it, as after the reconciler's other races with the relay.

Commands per run: a few per chunk and a few per swap, however many ids are stale.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass

import redis

from queue_app.broker.keys import (
    RECONCILE_KEY_TTL_SECONDS,
    fifo_key,
    reconcile_rebuild_key,
    reconcile_rebuild_lock_key,
    reconcile_stale_key,
)

# Ids the rebuild copies per script: each holds Redis about a millisecond (copying an id
# in and out of Lua costs about a microsecond).
COPY_IDS = 500
# Ids of a chunk whose places are checked before the chunk is trusted.
CHECKED_IDS = 8
# Chunks nearest the head the swap may fall back to, when the head reached the last ones.
SWAP_CANDIDATES = 3
# A crashed run's lock lapses this long after it last renewed it.
LOCK_SECONDS = 300

# Pushes the marker onto the tail of a non-empty list; returns whether it did.
_MARK = """
if redis.call('LLEN', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
return 1
"""

# Copies the chunk of up to ARGV[3] ids that ends ARGV[2] ids in front of the marker
# ARGV[1] onto the head of the copy (KEYS[2], expiring after ARGV[4] seconds), less the
# ids in the stale set (KEYS[3]); first checks that ARGV[5...] (the first ids of the
# previous chunk) are still where they were. Replies {'ok', ids read, ids kept, {the
# first few of them}}; {'moved'} when the previous chunk's ids are not in place;
# {'gone'} when the marker is not (popped).
_COPY_CHUNK = """
local marker = redis.call('LPOS', KEYS[1], ARGV[1], 'RANK', -1)
if not marker then return {'gone'} end
local start = marker - tonumber(ARGV[2])
if #ARGV > 4 then
  if start < 0 then return {'moved'} end
  local seen = redis.call('LRANGE', KEYS[1], start, start + #ARGV - 5)
  for i = 5, #ARGV do
    if seen[i - 4] ~= ARGV[i] then return {'moved'} end
  end
end
if start <= 0 then return {'ok', 0, 0, {}} end
local ids = redis.call('LRANGE', KEYS[1], math.max(0, start - tonumber(ARGV[3])), start - 1)
local stale = redis.call('SMISMEMBER', KEYS[3], unpack(ids))
local kept = {}
for i = #ids, 1, -1 do
  if stale[i] == 0 then kept[#kept + 1] = ids[i] end
end
if #kept > 0 then
  redis.call('LPUSH', KEYS[2], unpack(kept))
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
end
local first = {}
for i = 1, math.min(#ids, CHECKED_IDS) do first[i] = ids[i] end
return {'ok', #ids, #kept, first}
""".replace("CHECKED_IDS", str(CHECKED_IDS))

# Swaps the pruned copy (KEYS[2]) in for the list (KEYS[1]). ARGV: the marker, how many
# ids to drop from the copy's head first (chunks found moved), the most ids the head
# part may hold, then the candidate chunks, last read first, each as: its distance
# from the marker, its kept count, n, and its first n ids. The first candidate whose
# ids are still in place (and whose head part is short enough) is where the copy
# starts; the copies of the chunks before it are dropped. Then: the head part, the
# copy, and what was pushed behind the marker, in order, become the list. Returns the
# candidate's distance, or -1 (nothing swapped, the marker removed) when none fits.
_SWAP = """
local marker = redis.call('LPOS', KEYS[1], ARGV[1], 'RANK', -1)
if not marker then
  redis.call('DEL', KEYS[2])
  return -1
end
local drop, max_head = tonumber(ARGV[2]), tonumber(ARGV[3])
local chosen, i = nil, 5
for _ = 1, tonumber(ARGV[4]) do
  local reach, kept, n = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local start = marker - reach
  local fits = start >= 0 and start <= max_head
  if fits then
    local seen = redis.call('LRANGE', KEYS[1], start, start + n - 1)
    for j = 1, n do
      if seen[j] ~= ARGV[i + 2 + j] then fits = false break end
    end
  end
  if fits then chosen = reach break end
  drop = drop + kept
  i = i + 3 + n
end
if not chosen then
  redis.call('LREM', KEYS[1], -1, ARGV[1])
  redis.call('DEL', KEYS[2])
  return -1
end
if drop > 0 then redis.call('LTRIM', KEYS[2], drop, -1) end
local block = 1000
-- The head part, in blocks from its end: each block pushed reversed lands in order.
local last = marker - chosen - 1
while last >= 0 do
  local ids = redis.call('LRANGE', KEYS[1], math.max(0, last - block + 1), last)
  local reversed = {}
  for j = #ids, 1, -1 do reversed[#reversed + 1] = ids[j] end
  redis.call('LPUSH', KEYS[2], unpack(reversed))
  last = last - #ids
end
-- What was pushed behind the marker.
local first = marker + 1
while true do
  local ids = redis.call('LRANGE', KEYS[1], first, first + block - 1)
  if #ids == 0 then break end
  redis.call('RPUSH', KEYS[2], unpack(ids))
  first = first + #ids
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[1])
  redis.call('PERSIST', KEYS[1])
else
  redis.call('DEL', KEYS[1])
end
return chosen
"""

# Releases the lock if this run still holds it.
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class _Chunk:
    reach: int  # distance from the marker of its first id (the one nearest the head)
    removed: int
    kept: int
    first_ids: list[str]


def prune_list(
    client: redis.Redis,
    queue: str,
    pick: Callable[[list[str]], Collection[str]],
    *,
    chunk: int = 1000,
    remove: bool = True,
) -> int:
    """Drop the ids ``pick`` returns (asked a chunk at a time) from the queue's FIFO list,
    keeping the order of the rest and every id pushed meanwhile; returns how many went.

    ``pick`` gets ``chunk`` ids at a time; the rebuild copies COPY_IDS at a time. With
    ``remove`` off (a dry run) the list is only read and ``pick`` only asked. Another
    reconciler's run on the same list in progress: returns 0, and ``pick`` is not asked.
    """
    key = fifo_key(queue)
    if not remove:
        _find_stale(client, key, pick, chunk, stale_key=None)
        return 0
    token = uuid.uuid4().hex
    lock, copy = reconcile_rebuild_lock_key(queue), reconcile_rebuild_key(queue, token)
    stale_key, marker = reconcile_stale_key(queue, token), f"reconcile-marker:{token}"
    if not client.set(lock, token, nx=True, ex=LOCK_SECONDS):
        return 0
    marked = rebuilt = False
    try:
        if not _find_stale(client, key, pick, chunk, stale_key=stale_key):
            return 0
        client.expire(lock, LOCK_SECONDS)
        marked = bool(client.eval(_MARK, 1, key, marker))
        if not marked:
            return 0
        removed = _rebuild(client, (key, copy, stale_key), marker, min(chunk, COPY_IDS))
        rebuilt = True
        return removed
    finally:
        with contextlib.suppress(redis.RedisError):
            if marked and not rebuilt:
                # A store error mid-way: the list as it was (LREM from the tail stops at the marker).
                client.lrem(key, -1, marker)
                client.delete(copy)
            # UNLINK: a set of many stale ids is freed off Redis's main thread.
            client.unlink(stale_key)
            client.eval(_UNLOCK, 1, lock, token)


def _find_stale(
    client: redis.Redis,
    key: str,
    pick: Callable[[list[str]], Collection[str]],
    chunk: int,
    *,
    stale_key: str | None,
) -> bool:
    """Read the list from the head in chunks, asking ``pick``; the stale ids go to ``stale_key``.
    Whether any was found.

    Pops meanwhile may let a few ids go unread (the next run finds those).
    """
    start, found = 0, False
    while True:
        ids = client.lrange(key, start, start + chunk - 1)
        stale = list(dict.fromkeys(pick(ids))) if ids else []
        if stale and stale_key is not None:
            pipe = client.pipeline(transaction=False)
            pipe.sadd(stale_key, *stale)
            pipe.expire(stale_key, RECONCILE_KEY_TTL_SECONDS)
            pipe.execute()
            found = True
        if len(ids) < chunk:
            return found
        start += len(ids)


def _rebuild(client: redis.Redis, keys: tuple[str, str, str], marker: str, chunk: int) -> int:
    """Copy the list (in front of ``marker``) less the stale ids, tail first, and swap the
    copy in; how many went. ``keys``: the list, the copy, the stale set."""
    key, copy, _ = keys
    chunks: list[_Chunk] = []
    dropped = 0  # copies of chunks found moved, at the head of the copy
    reach = 0
    while True:
        checked = chunks[-1].first_ids if chunks else []
        reply = client.eval(_COPY_CHUNK, 3, *keys, marker, reach, chunk, RECONCILE_KEY_TTL_SECONDS, *checked)
        if reply[0] == "gone":
            client.delete(copy)
            return 0
        if reply[0] == "moved":
            # The head reached the chunk copied last: its ids may have changed since.
            dropped += chunks.pop().kept
            break
        _, read, kept, first_ids = reply
        if not read:
            break
        reach += read
        chunks.append(_Chunk(reach, read - kept, kept, first_ids))
        if read < chunk:
            break
    candidates = []
    for candidate in reversed(chunks[-SWAP_CANDIDATES:]):
        candidates += [candidate.reach, candidate.kept, len(candidate.first_ids), *candidate.first_ids]
    max_head = max(4 * chunk, 10_000)
    args = (marker, dropped, max_head, min(len(chunks), SWAP_CANDIDATES), *candidates)
    reached = client.eval(_SWAP, 2, key, copy, *args)
    return sum(c.removed for c in chunks if c.reach <= reached) if reached >= 0 else 0
