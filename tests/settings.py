"""Settings for the test suite: the project's settings plus the probe app.

Tests use a Redis database of their own (15 unless REDIS_TEST_DB says
otherwise), since each test empties it; under pytest-xdist each worker gwN
takes the one N below it (15, 14, ...), as pytest-django gives each its own
test database. Worker subprocesses started by tests inherit this module
through DJANGO_SETTINGS_MODULE, and the xdist worker's name with the environment.
"""

import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import structlog

from jobsite.settings import *  # noqa: F403
from jobsite.settings import CACHE_URL, CACHES, INSTALLED_APPS, REDIS_URL


def _with_db(url: str, db: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = dict(parse_qsl(parts.query))
        query["db"] = db
        # Spelled out: urlunsplit drops the "//" of a scheme it does not know when the
        # netloc is empty, and redis-py rejects "unix:/path".
        return f"unix://{parts.netloc}{parts.path}?{urlencode(query)}"
    return urlunsplit(parts._replace(path=f"/{db}"))


# structlog.testing.capture_logs cannot see loggers cached on first use.
structlog.configure(cache_logger_on_first_use=False)

INSTALLED_APPS = [*INSTALLED_APPS, "tests.probe"]
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_TEST_DB = str(int(os.environ.get("REDIS_TEST_DB", "15")) - int(_XDIST_WORKER.removeprefix("gw")))
# A Redis Cluster has database 0 only: a test that uses one starts its own.
if not REDIS_URL.partition("://")[0].endswith("+cluster"):
    REDIS_URL = _with_db(REDIS_URL, _TEST_DB)
CACHE_URL = _with_db(CACHE_URL, _TEST_DB)
CACHES["default"]["LOCATION"] = CACHE_URL
# The suite submits the demo types whatever DEBUG says.
DEMO_JOB_TYPES = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Where probe handlers journal their executions (tests/probe/journal.py); empty = off.
PROBE_JOURNAL_DIR = os.environ.get("PROBE_JOURNAL_DIR", "")
