"""Every Lua script runs by its SHA1 (EVALSHA), never by its text (EVAL), and still runs
after Redis has lost its script cache (SCRIPT FLUSH, or a restart: NOSCRIPT).

Redis documents the pattern: EVALSHA, and on NOSCRIPT load the script and call
again (https://redis.io/docs/latest/develop/interactive/programmability/eval-intro/,
"Script cache"); redis-py's ``register_script`` does it.
"""

from __future__ import annotations

import pytest

from queue_app import broker
from queue_app.broker import push

pytestmark = pytest.mark.redis


def commands_run(client) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT, as INFO commandstats counts them."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}


def every_script(client) -> dict[str, object]:
    """Run each script the broker has once, on fresh keys; what each returned."""
    client.flushdb()
    results: dict[str, object] = {}
    broker.push_ready(client, "p", [(0.0, "0000000000000001:a"), (0.0, "0000000000000002:b")])
    # More than one script call's worth: one pipeline of EVALSHAs.
    broker.push_ready(client, "big", [(0.0, f"{i:016d}:id{i}") for i in range(2500)])
    results["big"] = client.zcard(broker.priority_key("big"))
    results["heads"] = broker.ready_heads(client, [("p", False)])
    results["reserve"] = broker.reserve(client, "p", False, 1)
    results["put_back"] = broker.put_back(client, "p", False, results["reserve"])
    results["wait_and_reserve"] = broker.wait_and_reserve(client, "p", False, 2, timeout=0.1)
    client.zadd(broker.inflight_key("p"), {"a": 0, "b": 0})  # as if their worker died long ago
    results["return_expired"] = broker.return_expired(client, "p", False)
    client.zadd(broker.retry_key("p"), {"due": 0, "later": 2**40})
    results["take_due"] = broker.take_due(client, "p")
    client.rpush(broker.fifo_key("f"), "x", "y")
    members = broker.reconcile_members_key("f", "t")
    results["snapshot"] = broker.snapshot_list(client, broker.fifo_key("f"), members)
    broker.restore(client, [broker.Intent("enqueue", "w", "f", True, 1.0)], staging_token="t")
    results["release_staged"] = broker.release_staged(client, "f", "t")
    results["fifo"] = client.lrange(broker.fifo_key("f"), 0, -1)
    return results


EXPECTED = {
    "big": 2500,
    "heads": ["a"],
    "reserve": ["a"],
    "put_back": 1,
    "wait_and_reserve": ["a", "b"],
    "return_expired": 2,
    "take_due": ["due"],
    "snapshot": 2,
    "release_staged": 1,
    "fifo": ["w", "x", "y"],
}


def test_scripts_run_by_sha_and_survive_a_script_flush(redis_client):
    every_script(redis_client)  # loads what is not loaded yet
    redis_client.config_resetstat()
    assert every_script(redis_client) == EXPECTED
    redis_client.script_flush()
    assert every_script(redis_client) == EXPECTED
    run = commands_run(redis_client)
    assert run.get("evalsha", 0) >= 2 * 12
    assert "eval" not in run, run


def test_the_push_after_commit_runs_by_sha_and_reloads_its_script(redis_client):
    """The fire-and-forget push cannot retry a NOSCRIPT it reads later: its connection
    loads the script on connecting, and again after a NOSCRIPT; the one push that met
    it is left to the relay (its outbox row is sent after RELAY_GRACE_SECONDS)."""
    sender = push._sender(redis_client)

    def pushed(member: str) -> bool:
        push.send_ready(redis_client, {"p": [(0.0, member)]})
        sender.read_replies()
        return redis_client.zscore(broker.priority_key("p"), member) is not None

    assert pushed("0000000000000001:a")
    redis_client.config_resetstat()
    assert pushed("0000000000000002:b")

    redis_client.script_flush()  # on a live connection: the next push meets NOSCRIPT
    assert not pushed("0000000000000003:c")
    assert pushed("0000000000000004:d")

    # A restart: the connection goes, and so do the scripts. The next push connects
    # again, which loads the script first: nothing is lost.
    sender.connection.send_command("CLIENT", "ID")
    connection_id = sender.connection.read_response()
    redis_client.script_flush()
    redis_client.client_kill_filter(_id=connection_id)
    assert pushed("0000000000000005:e")

    run = commands_run(redis_client)
    assert run.get("evalsha", 0) >= 4
    assert "eval" not in run, run
