"""The cache cannot wipe the queue: it lives in another Redis database, and a check says so
when a configuration puts both in one.

django-redis's ``cache.clear()`` is FLUSHDB of the cache's database (its
``DefaultClient.clear``), so the only protection is the database itself.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone

from queue_app import broker, services
from queue_app.checks import check_cache_apart_from_queue
from queue_app.redis_databases import Database, cache_url_beside, database, shared_database
from queue_app.runtime.relay import Relay
from tests.helpers import PROJECT_ROOT, child_env


@pytest.mark.django_db
@pytest.mark.redis
def test_clearing_the_cache_leaves_the_queues_ready_in_flight_and_retry_ids(redis_client, relay_path):
    ready = {str(services.enqueue_job("probe.run", {}).id) for _ in range(2)}
    waiting = str(services.enqueue_job("probe.run", {}, run_at=timezone.now() + timedelta(hours=1)).id)
    Relay().drain()
    popped = broker.reserve(redis_client, "default", False, 1)  # one into flight
    cache.set("throttle", 1)

    cache.clear()

    assert cache.get("throttle") is None
    members = redis_client.zrange(broker.priority_key("default"), 0, -1)
    assert [broker.member_job_id(member) for member in members] == sorted(ready - set(popped))
    assert redis_client.zrange(broker.inflight_key("default"), 0, -1) == popped
    assert redis_client.zrange(broker.retry_key("default"), 0, -1) == [waiting]


def test_the_cache_defaults_to_the_other_database_of_the_queues_pair():
    assert cache_url_beside("redis://10.0.0.9:6379/0") == "redis://10.0.0.9:6379/1"
    assert (
        cache_url_beside("rediss://user:secret@redis.example:6380/15")
        == "rediss://user:secret@redis.example:6380/14"
    )
    assert cache_url_beside("redis://localhost:6379") == "redis://localhost:6379/1"
    assert cache_url_beside("redis://localhost:6379/0?db=4") == "redis://localhost:6379/0?db=5"
    assert cache_url_beside("unix:///run/redis.sock") == "unix:///run/redis.sock?db=1"
    assert cache_url_beside("unix:///run/redis.sock?db=3") == "unix:///run/redis.sock?db=2"


def test_the_project_settings_put_the_cache_beside_the_queue_unless_told():
    """Read from jobsite.settings itself (the test settings move both databases)."""
    code = "from django.conf import settings; print(settings.CACHES['default']['LOCATION'])"
    env = {
        **child_env(REDIS_URL="redis://127.0.0.1:6390/2"),
        "DJANGO_SETTINGS_MODULE": "jobsite.settings",
        "JOBSITE_ENV_FILE": "",
    }
    env.pop("CACHE_URL", None)
    location = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert location == "redis://127.0.0.1:6390/3"

    told = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "manage.py"), "check"],
        cwd=PROJECT_ROOT,
        env={**env, "CACHE_URL": "redis://localhost:6390/2"},
        capture_output=True,
        text=True,
    )
    assert told.returncode == 1
    assert "(queue_app.E014)" in told.stderr and "database 2 of localhost:6390" in told.stderr


@pytest.mark.parametrize(
    ("queue", "cache_location", "shared"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", Database("localhost:6379", 0)),
        # One database, spelled otherwise: host name, default port and database, ?db=.
        ("redis://127.0.0.1:6379/0", "redis://localhost", Database("localhost:6379", 0)),
        ("redis://[::1]:6379/5", "rediss://u:p@LOCALHOST:6379/0?db=5", Database("localhost:6379", 5)),
        (
            "unix:///run/redis/../redis.sock?db=2",
            "unix:///run/redis.sock?db=2",
            Database("unix:/run/redis.sock", 2),
        ),
        # A cluster has database 0 only: any of its nodes is the queue's database.
        (
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
            "redis://10.0.0.2:7000/0",
            Database("10.0.0.2:7000", 0),
        ),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1", None),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6380/0", None),
        ("unix:///run/redis.sock", "unix:///run/redis.sock?db=1", None),
        ("unix:///run/redis.sock", "redis://127.0.0.1:6379/0", None),
        ("redis+cluster://10.0.0.1:7000,10.0.0.2:7000", "redis://10.0.0.3:7000/0", None),
    ],
)
def test_which_urls_share_a_database(queue, cache_location, shared):
    assert shared_database(cache_location, queue) == shared


def run_check(queue_url: str, location) -> list:
    caches = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location}}
    with override_settings(REDIS_URL=queue_url, CACHES=caches):
        return check_cache_apart_from_queue(None)


def test_the_check_fires_when_the_cache_is_in_the_queues_database(settings):
    assert run_check(settings.REDIS_URL, settings.CACHES["default"]["LOCATION"]) == []

    (error,) = run_check(settings.REDIS_URL, settings.REDIS_URL)
    assert error.id == "queue_app.E014" and error.is_serious()
    assert str(database(settings.REDIS_URL)) in error.msg
    assert "another database" in error.hint
    # A replica list counts each of its URLs.
    (error,) = run_check("redis://127.0.0.1:6379/0", ["redis://127.0.0.1:6379/1", "redis://localhost:6379/0"])
    assert error.id == "queue_app.E014"


def test_on_a_cluster_the_check_says_to_use_another_server_or_accept():
    (error,) = run_check("redis+cluster://10.0.0.1:7000,10.0.0.2:7000", "redis://10.0.0.1:7000")
    assert error.id == "queue_app.E014"
    assert "another Redis server" in error.hint and "SILENCED_SYSTEM_CHECKS" in error.hint
