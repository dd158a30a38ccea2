"""Settings for the test suite: the project's settings plus the probe app.

Tests use a Redis database of their own (15 unless REDIS_TEST_DB says
otherwise), since each test empties it; under pytest-xdist each worker gwN
takes the one N below it (15, 14, ...), as pytest-django gives each its own
test database. The cache takes the database 8 away from the worker's queue
database (7, 6, ...): apart from the queue's, as in production, and from every
other worker's, for up to eight workers. Worker subprocesses started by tests
inherit this module through DJANGO_SETTINGS_MODULE, and the xdist worker's name
with the environment.
"""

import os

import structlog

from jobsite.settings import *  # noqa: F403
from jobsite.settings import CACHE_URL, CACHES, INSTALLED_APPS, REDIS_URL
from queue_app.redis_databases import is_cluster_url, with_database

# structlog.testing.capture_logs cannot see loggers cached on first use.
structlog.configure(cache_logger_on_first_use=False)

INSTALLED_APPS = [*INSTALLED_APPS, "tests.probe"]
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_TEST_DB = int(os.environ.get("REDIS_TEST_DB", "15")) - int(_XDIST_WORKER.removeprefix("gw"))
# A Redis Cluster has database 0 only: a test that uses one starts its own.
if not is_cluster_url(REDIS_URL):
    REDIS_URL = with_database(REDIS_URL, _TEST_DB)
CACHE_URL = with_database(CACHE_URL, (_TEST_DB + 8) % 16)
CACHES["default"]["LOCATION"] = CACHE_URL
# The suite submits the demo types whatever DEBUG says.
DEMO_JOB_TYPES = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Where probe handlers journal their executions (tests/probe/journal.py); empty = off.
PROBE_JOURNAL_DIR = os.environ.get("PROBE_JOURNAL_DIR", "")
# Fault injection, for fault-injection tests and the chaos run (which runs on these settings):
# JOBSITE_FAILPOINTS arms named points (tests/fault_points.py). Unset, no handler is installed
# and a fault point in the relay or the worker is a check of None, as in production.
FAILPOINTS = os.environ.get("JOBSITE_FAILPOINTS", "")
FAULT_POINT_HANDLER = "tests.fault_points.hit" if FAILPOINTS else ""
