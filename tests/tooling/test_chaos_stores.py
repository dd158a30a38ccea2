"""The chaos run's own Redis survives overlapping restart faults as one server.

Two restart faults may overlap: the first one's delayed start can come after the
second one's stop. A second server started on the same socket took the new
connections while the old ones stayed on the first, so clients saw two Redis
(a chaos run failed that way: the reconciler kept checking a server the workers
no longer used).
"""

from __future__ import annotations

import redis

from tests.helpers import PROJECT_ROOT


def test_a_start_that_finds_redis_running_starts_no_second_server(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))
    from chaoslib.stores import DedicatedStores

    stores = DedicatedStores(tmp_path, redis_db=0)
    stores.start_redis()
    try:
        first = stores._redis
        stores.stop_redis()  # fault A: down for a while
        stores.stop_redis()  # fault B stops it too, while it is still down
        stores.start_redis()  # A's start
        running = stores._redis
        client = redis.Redis.from_url(stores.redis_url)
        client.set("marker", "1")
        stores.start_redis()  # B's start: the server is up already

        assert first.poll() is not None
        assert stores._redis is running and running.poll() is None
        assert redis.Redis.from_url(stores.redis_url).get("marker") == b"1"  # the same server
        client.close()
    finally:
        stores.stop_redis()
