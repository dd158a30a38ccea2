"""With DATABASE_URL / REDIS_URL unset, every process reaches the same embedded servers."""

import json
import os
import subprocess
import sys

from tests.helpers import PROJECT_ROOT

PROBE = (
    "import django, json; django.setup();"
    "from django.conf import settings; from django.db import connection;"
    "from queue_app import broker;"
    "cursor = connection.cursor(); cursor.execute('SELECT pg_postmaster_start_time()::text');"
    "info = broker.get_client().info('server');"
    "print(json.dumps({'db': settings.DATABASE_URL, 'redis': settings.REDIS_URL,"
    " 'pg_started': cursor.fetchone()[0], 'redis_pid': info['process_id']}))"
)


def _run(**extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update({"DJANGO_SETTINGS_MODULE": "jobsite.settings", "DEBUG": "1", **extra})
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_separate_processes_share_one_embedded_postgres_and_redis():
    first, second = _run(), _run()
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["db"] == b["db"] and a["redis"] == b["redis"]
    assert a["redis"].startswith("unix://")
    # Reused, not restarted: same postmaster start time and the same Redis process.
    assert a["pg_started"] == b["pg_started"] and a["redis_pid"] == b["redis_pid"]


def test_a_server_that_cannot_start_explains_what_to_set(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = _run(JOBSITE_DATA_DIR=str(blocker / "data"))
    assert result.returncode != 0
    assert "Could not start the embedded PostgreSQL" in result.stderr
    assert "set DATABASE_URL" in result.stderr
