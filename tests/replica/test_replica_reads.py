"""Against a real streaming replica: the history pages read it, the engine and a job's own pages
never do, and a replica that goes down leaves the pages reading the primary.

A primary of the test's own and a hot standby copied from it (tests/replica/streaming.py).
Holding the standby's replay back (``pg_wal_replay_pause()``) makes the two differ without
any timing: a job enqueued meanwhile is on the primary only, until replay resumes. The
Django side runs in a child process configured with both databases
(tests/replica/scenario.py), which reports what each page showed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

from tests.helpers import PROJECT_ROOT, python_json
from tests.pgserver_binaries import BinariesMissing
from tests.replica.streaming import StreamingReplication

pytestmark = pytest.mark.redis  # the child process enqueues, and pushes the ids to Redis

HISTORY_PAGES = ("admin_jobs", "admin_logs", "admin_outbox", "api_jobs")


def child_env(primary_url: str, replica_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": primary_url,
        "DATABASE_REPLICA_URL": replica_url,
        "REDIS_URL": settings.REDIS_URL,
        "DEBUG": "1",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture(scope="module")
def replication():
    """A migrated primary and one hot standby streaming from it."""
    # Not under pytest's own temporary folder: its parent is root's alone, which the servers'
    # user could not pass through.
    folder = Path(tempfile.mkdtemp(prefix="replication-"))
    try:
        servers = StreamingReplication(folder)
    except BinariesMissing as missing:
        shutil.rmtree(folder)
        pytest.skip(f"no PostgreSQL binaries to run a primary and a standby: {missing}")
    try:
        servers.start()
        servers.add_standby()
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput"],
            cwd=PROJECT_ROOT,
            env=child_env(servers.primary.url, servers.standbys[0].url),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert migrate.returncode == 0, migrate.stderr
        servers.caught_up(servers.standbys[0])
        yield servers
    finally:
        servers.stop()
        shutil.rmtree(folder, ignore_errors=True)


def scenario(name: str, replication: StreamingReplication) -> dict:
    env = child_env(replication.primary.url, replication.standbys[0].url)
    return python_json(["-m", "tests.replica.scenario", name], env)


def test_history_pages_read_the_replica_and_a_jobs_own_pages_the_primary(replication):
    seen = scenario("reads", replication)

    # Replay held back: the new job is on the primary only, and no history page shows it.
    paused = seen["paused"]
    assert {page: paused[page] for page in HISTORY_PAGES} == {page: [200, False] for page in HISTORY_PAGES}
    assert paused["api_stats_total"] == [200, seen["primary_total"] - 1]
    # Its own pages read the primary: whoever opens them is about to act on it.
    assert seen["own"] == {"admin_job_page": [200, True], "api_job": [200, True]}

    # Replay resumed: the replica has it, and so do the pages.
    resumed = seen["resumed"]
    assert {page: resumed[page] for page in HISTORY_PAGES} == {page: [200, True] for page in HISTORY_PAGES}
    assert resumed["api_stats_total"] == [200, seen["primary_total"]]


def test_the_dashboard_reads_the_replica(replication):
    seen = scenario("dashboard", replication)

    assert seen["jobs_after"] == seen["jobs_before"] + 3
    assert seen["paused"] == [200, seen["jobs_before"]]
    assert seen["resumed"] == [200, seen["jobs_after"]]


def test_the_engine_acts_on_the_primary_while_replay_is_held_back(replication):
    seen = scenario("engine", replication)

    assert seen["replica_has_them"] == 0  # neither job had reached the replica meanwhile
    assert seen["claimed"] is True
    assert seen["after_claim"] == "processing"
    assert seen["cancel_returned"] == seen["after_cancel"] == "cancelling"
    assert seen["admin_cancel"] == [302, "cancelled"]
    assert seen["api_retry"] == [200, "queued"]
    assert seen["service_cancel_then_retry"] == ["cancelled", "queued"]
    assert seen["replica_has_them_after"] == 2


def test_pages_read_the_primary_when_the_replica_goes_down(replication):
    standby = replication.add_standby()
    env = child_env(replication.primary.url, standby.url)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.replica.scenario", "replica_lost"],
        cwd=PROJECT_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "stop-replica", child.stderr.read()[-4000:]
        standby.stop()
        out, err = child.communicate("go\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err[-4000:]
    seen = json.loads(out.strip().splitlines()[-1])

    # Before: the list was read through a kept connection to the replica.
    assert seen["before"] == [200, True]
    # After: every page still answers, from the primary, which has the newest job.
    after = seen["after"]
    assert {page: after[page] for page in HISTORY_PAGES} == {page: [200, True] for page in HISTORY_PAGES}
    assert after["api_stats_total"][0] == 200
    assert seen["own"] == {"admin_job_page": [200, True], "api_job": [200, True]}
    assert "replica_unavailable_reading_primary" in seen["warnings"]
