"""Fixtures shared by the suite: a clean Redis database per test, and process helpers."""

import pytest
from django.conf import settings

from queue_app import broker


@pytest.fixture(autouse=True)
def redis_client():
    """The tests' own Redis database, emptied around every test."""
    client = broker.get_client()
    client.flushdb()
    yield client
    client.flushdb()


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
