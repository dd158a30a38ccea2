"""The cluster URL form of REDIS_URL, and CACHE_URL, which must stay a plain Redis."""

from __future__ import annotations

import subprocess
import sys

import pytest

from queue_app import broker
from queue_app.api.health import check_redis
from tests.cluster.conftest import _free_ports
from tests.helpers import PROJECT_ROOT, child_env


def test_discovery_starts_from_any_listed_node_that_answers(redis_cluster):
    (dead,) = _free_ports(1)
    live = redis_cluster["ports"][1]
    client = broker.connect(f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{live}", decode_responses=True)
    try:
        assert broker.is_cluster(client)
        assert {node.port for node in client.get_primaries()} == set(redis_cluster["ports"])
    finally:
        client.close()


@pytest.mark.parametrize(
    "url", ["redis+cluster://", "redis+cluster://127.0.0.1", "redis+cluster://host:port"]
)
def test_a_cluster_url_without_host_and_port_is_refused_naming_the_setting(url):
    with pytest.raises(ValueError, match="REDIS_URL"):
        broker.connect(url)


def test_health_reports_an_unreachable_cluster_instead_of_raising(settings):
    (dead,) = _free_ports(1)
    settings.REDIS_URL = f"redis+cluster://127.0.0.1:{dead}"
    answer = check_redis()
    assert answer != "ok" and str(dead) in answer


def test_settings_refuse_a_cluster_cache_url():
    script = "import django; django.setup()"
    env = child_env(CACHE_URL="redis+cluster://127.0.0.1:7100")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "CACHE_URL must name a plain Redis" in result.stderr
