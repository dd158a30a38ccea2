"""DATABASE_REPLICA_URL: the ``replica`` database it adds, and the check that refuses one without
its router. Read in a child process, as settings are read once per process."""

import json
import subprocess
import sys

from tests.helpers import child_env

READ_SETTINGS = """
import json, django
django.setup()
from django.conf import settings
from django.core import checks
from django.test import override_settings
replica = settings.DATABASES.get("replica")
with override_settings(DATABASE_ROUTERS=[]):
    without_router = [m.id for m in checks.run_checks() if m.id.startswith("queue_app.")]
print(json.dumps({
    "replica": replica and {
        key: replica.get(key)
        for key in ("HOST", "PORT", "NAME", "CONN_MAX_AGE", "DISABLE_SERVER_SIDE_CURSORS", "OPTIONS")
    } | {"test_mirror": replica["TEST"].get("MIRROR")},
    "routers": settings.DATABASE_ROUTERS,
    "checks": [m.id for m in checks.run_checks() if m.id.startswith("queue_app.")],
    "checks_without_router": without_router,
}))
"""


def read_settings(**env: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", READ_SETTINGS],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_replica_url_adds_the_replica_database_read_through_the_router():
    seen = read_settings(DATABASE_REPLICA_URL="postgres://reader@standby.internal:5433/jobs")

    assert seen["replica"] == {
        "HOST": "standby.internal",
        "PORT": 5433,
        "NAME": "jobs",
        "CONN_MAX_AGE": 60,
        "DISABLE_SERVER_SIDE_CURSORS": False,
        # Connections are kept, not pooled, and a replica that does not answer is given up on soon.
        "OPTIONS": {"connect_timeout": 2},
        # The test database, read through it as through a replica of it.
        "test_mirror": "default",
    }
    assert seen["routers"] == ["queue_app.replica.ReplicaRouter"]
    assert "queue_app.E015" not in seen["checks"]
    assert "queue_app.E015" in seen["checks_without_router"]


def test_the_replica_url_may_set_its_own_connect_timeout_and_follows_pgbouncer_mode():
    seen = read_settings(
        DATABASE_REPLICA_URL="postgres://reader@standby.internal/jobs?connect_timeout=7",
        DATABASE_PGBOUNCER="1",
    )

    assert seen["replica"]["OPTIONS"] == {"connect_timeout": 7, "prepare_threshold": None}
    assert seen["replica"]["DISABLE_SERVER_SIDE_CURSORS"] is True


def test_without_a_replica_url_there_is_no_replica_and_nothing_to_check():
    seen = read_settings(DATABASE_REPLICA_URL="")

    assert seen["replica"] is None
    assert "queue_app.E015" not in seen["checks_without_router"]
