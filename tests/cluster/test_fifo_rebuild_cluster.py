"""The rebuild of a FIFO list on a Redis Cluster: its scripts touch the queue's keys only, which
share the queue's hash tag, so each runs on the one master that serves the queue."""

from __future__ import annotations

from queue_app import broker


def test_a_fifo_list_is_pruned_on_a_cluster(redis_cluster):
    client = broker.connect(redis_cluster["url"], decode_responses=True)
    key = broker.fifo_key("bulk")
    try:
        ids = [f"id-{n:04d}" for n in range(2000)]
        stale = set(ids[::4])
        client.rpush(key, *ids)

        removed = broker.prune_list(client, "bulk", lambda chunk: [i for i in chunk if i in stale], chunk=300)

        assert removed == len(stale)
        assert client.lrange(key, 0, -1) == [job_id for job_id in ids if job_id not in stale]
        assert not client.exists(broker.reconcile_rebuild_lock_key("bulk"))
    finally:
        client.delete(key)
        client.close()
