"""Fixtures shared by the suite: Redis for the tests that ask for it, and process helpers.

A test that talks to Redis says so with ``@pytest.mark.redis`` (modules use
``pytestmark``) or by requesting ``redis_client``; its Redis database, and the
cache's, are emptied before and after it. Every
other test skips the flush, and afterwards both databases must still be empty:
an unmarked test that wrote to Redis fails, naming itself, instead of leaking
keys into the next test.
"""

import subprocess

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from queue_app import broker
from tests.helpers import kill_group

# The ``queue`` fixture (queue_app.testing), as a project using the app loads it.
pytest_plugins = ["queue_app.testing.fixtures"]


def _empty(client: redis.Redis) -> None:
    client.flushdb()
    cache.clear()


def _cache_size() -> int:
    """Keys in the cache's own database (tests/settings.py keeps it apart from the queue's);
    0 for a cache a test put in place of it (Django's own, with no client of django-redis)."""
    client = getattr(cache, "client", None)
    if client is None or not hasattr(client, "get_client"):
        return 0
    return client.get_client(write=True).dbsize()


@pytest.fixture
def redis_client():
    """The tests' own Redis database, emptied around the test."""
    client = broker.get_client()
    _empty(client)
    yield client
    _empty(client)


@pytest.fixture(autouse=True)
def _redis_only_when_marked(request):
    """Flush Redis around marked tests; prove unmarked ones left it untouched.

    An unmarked test (and the processes it starts) enqueues without pushing to Redis
    after the commit (DISPATCH_ON_COMMIT off): its jobs wait in the outbox for a relay.
    """
    if request.node.get_closest_marker("redis"):
        request.getfixturevalue("redis_client")
        yield
        return
    if "redis_client" not in request.fixturenames:
        request.getfixturevalue("relay_path")
    yield
    if "redis_client" in request.fixturenames:
        return  # asked for Redis by name: emptied by the fixture
    try:
        client = broker.get_client()  # a cluster client connects as it is made
        leaked = client.dbsize() + _cache_size()
    except (redis.RedisError, redis.exceptions.RedisClusterException):
        return  # Redis does not answer, so the test could not have written to it
    if leaked:
        _empty(client)
        pytest.fail(
            f"{request.node.nodeid} left {leaked} keys in Redis without @pytest.mark.redis",
            pytrace=False,
        )


@pytest.fixture
def processes():
    """Processes a test starts (``processes.append(popen)``); their groups are killed after it."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        kill_group(process)


@pytest.fixture
def relay_path(settings, monkeypatch):
    """Every job goes through the outbox and the relay (DISPATCH_ON_COMMIT off), here and
    in the processes the test starts: for tests of the relay's path itself, or that need
    jobs dispatched by it (a relay drain then leaves nothing undispatched)."""
    settings.JOBQUEUE = {**getattr(settings, "JOBQUEUE", {}), "DISPATCH_ON_COMMIT": False}
    monkeypatch.setenv("JOBQUEUE_DISPATCH_ON_COMMIT", "0")


@pytest.fixture
def queue_config(settings):
    """Override JOBQUEUE keys for one test: ``queue_config(LEASE_SECONDS=2)``."""

    def apply(**values):
        settings.JOBQUEUE = {**getattr(settings, "JOBQUEUE", {}), **values}

    return apply


def pytest_report_header(config):
    return [
        f"redis: {settings.REDIS_URL}",
        f"database: {settings.DATABASES['default'].get('HOST') or 'socket'}",
    ]
