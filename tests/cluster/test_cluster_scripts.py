"""The broker's scripts on a 3-master Redis Cluster: each runs by its SHA on the master
of its queue's slot, and runs again after every master lost its scripts (SCRIPT FLUSH).

redis-py routes EVALSHA by its keys and sends SCRIPT LOAD to every primary
(redis.cluster.RedisCluster's command flags), so NOSCRIPT is answered where the
call went and the retry finds the script there.
"""

from __future__ import annotations

import pytest
import redis

from queue_app import broker
from tests.pipeline.test_script_loading import EXPECTED, commands_run, every_script

pytestmark = pytest.mark.redis


def test_scripts_run_by_sha_on_a_cluster_and_survive_a_script_flush(redis_cluster):
    cluster = broker.connect(redis_cluster["url"], decode_responses=True)
    masters = [redis.Redis(port=port, decode_responses=True) for port in redis_cluster["ports"]]
    # The queues' keys live on more than one master, so more than one node runs scripts.
    slots = {cluster.get_node_from_key(broker.priority_key(queue)).name for queue in ("p", "big", "f")}
    assert len(slots) > 1
    every_script(cluster)
    for master in masters:
        master.config_resetstat()
    assert every_script(cluster) == EXPECTED
    cluster.script_flush()
    assert every_script(cluster) == EXPECTED
    runs = [commands_run(master) for master in masters]
    assert sum(run.get("evalsha", 0) for run in runs) >= 2 * 12
    assert not any("eval" in run for run in runs), runs
