"""``manage.py runsystem`` (what ``./dev up`` runs) as a real process tree: children
restarted when they die, SIGTERM stopping all, ``--no-admin-user``, ``--reconcile-interval``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from queue_app.models import Job, OutboxMessage
from queue_app.services import enqueue_job
from tests.helpers import child_env, manage, wait_until
from tests.probe.models import Execution
from tests.reconciler.proxy import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

ROLES = {
    "web": "runweb",
    "relay": "runrelay",
    "worker": "runworker",
    "reconciler": "reconcile_queue",
    "scheduler": "runscheduler",
}


class System:
    """A started ``runsystem``: its output lines as they come, and its children by role."""

    def __init__(self, *options: str, data_dir: Path, log_level: str = "WARNING") -> None:
        self.port = free_port()
        env = child_env(JOBSITE_DATA_DIR=str(data_dir), LOG_LEVEL=log_level)
        self.process = manage(
            "runsystem",
            f"--bind=127.0.0.1:{self.port}",
            "--concurrency=1",
            *options,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        # Drained continuously: the children share these pipes and would block on a full one.
        for stream, lines in ((self.process.stdout, self.stdout), (self.process.stderr, self.stderr)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def children(self) -> dict[str, int]:
        """role -> pid of runsystem's direct children (from /proc)."""
        pid = self.process.pid
        try:
            pids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:
            return {}
        found = {}
        for child in map(int, pids):
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            for role, command in ROLES.items():
                if command.encode() in argv:
                    found[role] = child
        return found

    def all_running(self) -> dict[str, int] | None:
        children = self.children()
        return children if len(children) == len(ROLES) else None

    def argv(self, role: str) -> list[str]:
        pid = self.children()[role]
        return [arg.decode() for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if arg]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/health/", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def terminate(self, timeout: float = 120) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


@pytest.fixture
def systems(tmp_path):
    started: list[System] = []

    def start(*options: str, log_level: str = "WARNING") -> System:
        system = System(*options, data_dir=tmp_path, log_level=log_level)
        started.append(system)
        return system

    yield start
    for system in started:
        system.kill()


def completes(job) -> None:
    wait_until(
        lambda: Job.objects.filter(id=job.id, status="completed").exists(),
        timeout=60,
        message=f"job {job.id} to complete",
    )


def process_group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_that_dies_is_restarted_and_sigterm_stops_them_all(systems):
    system = systems("--no-admin-user")
    first = wait_until(system.all_running, timeout=60, message="every child")
    wait_until(system.healthy, timeout=60, message="the web server")
    completes(enqueue_job("probe.run"))

    # Each child killed without warning comes back as a new process that does its work.
    for role in ("relay", "worker", "web"):
        os.kill(first[role], signal.SIGKILL)
        restarted = wait_until(
            lambda role=role: (pid := system.children().get(role)) and pid != first[role] and pid,
            timeout=60,
            message=f"the {role} to be restarted",
        )
        assert any(line.startswith(f"{role} exited with -9; restarting") for line in system.stderr)
        assert restarted != first[role]
    wait_until(system.healthy, timeout=60, message="the restarted web server")
    # Only the restarted relay can take this job to Redis, and only the restarted worker run it.
    completes(enqueue_job("probe.run"))
    reconciler = system.children()["reconciler"]
    assert reconciler == first["reconciler"]

    # SIGTERM: every child stops, the running job finishes first, runsystem exits cleanly.
    running = enqueue_job("probe.run", {"sleep": 1})
    wait_until(lambda: Execution.objects.filter(job_id=running.id).exists(), message="the job to start")
    children = system.children()
    assert system.terminate() == 0
    assert "All processes stopped." in system.stdout
    assert Job.objects.get(id=running.id).status == "completed"
    for pid in children.values():
        assert not Path(f"/proc/{pid}").exists()
    # Nothing the system started (worker processes included) outlives it.
    assert wait_until(lambda: process_group_gone(system.process.pid), timeout=10)


LOGIN = re.compile(r"^  Admin:\s+http://127\.0\.0\.1:\d+/admin/\s+user: admin\s+password: (\S+)$")
TOKEN = re.compile(r"^  API:\s+http://127\.0\.0\.1:\d+/api/jobs/\s+\(Authorization: Token (\w+)\)$")


def test_with_debug_it_creates_and_prints_the_admin_login_and_keeps_it_across_starts(systems, tmp_path):
    system = systems()
    wait_until(lambda: any(line.startswith("Started ") for line in system.stdout), timeout=60)
    assert system.terminate() == 0
    (password,) = [m.group(1) for m in map(LOGIN.match, system.stdout) if m]
    (token,) = [m.group(1) for m in map(TOKEN.match, system.stdout) if m]
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff and admin.check_password(password)
    assert Token.objects.get(user=admin).key == token
    saved = tmp_path / "admin-login.txt"
    assert saved.read_text().strip() == password and saved.stat().st_mode & 0o777 == 0o600

    again = systems()
    wait_until(lambda: any(line.startswith("Started ") for line in again.stdout), timeout=60)
    assert again.terminate() == 0
    assert [m.group(1) for m in map(LOGIN.match, again.stdout) if m] == [password]


def test_no_admin_user_creates_and_prints_no_login(systems, tmp_path):
    system = systems("--no-admin-user")
    wait_until(lambda: any(line.startswith("Started ") for line in system.stdout), timeout=60)
    assert system.terminate() == 0
    assert not any(LOGIN.match(line) or TOKEN.match(line) for line in system.stdout)
    assert not get_user_model().objects.exists()
    assert not (tmp_path / "admin-login.txt").exists()


def test_reconcile_interval_sets_how_often_the_reconciler_repairs_redis(relay_path, systems):
    system = systems("--no-admin-user", "--reconcile-interval=0.5", log_level="INFO")
    wait_until(system.all_running, timeout=60, message="every child")
    assert "--interval=0.5" in system.argv("reconciler")

    def passes() -> int:
        return sum("reconcile_finished" in line for line in system.stderr)

    wait_until(passes, timeout=60, message="the first reconcile pass")
    # A job Redis lost: its outbox row reads as relayed an hour ago, so the relay never
    # sends it and only a reconcile pass (past its grace) can bring it back.
    with transaction.atomic():
        lost = enqueue_job("probe.run")
        OutboxMessage.objects.filter(job_id=lost.id).update(dispatched_at="2020-01-01T00:00:00Z")
    after_commit = passes()
    completes(lost)
    # With the default 30 s interval these passes would take a minute; 0.5 s takes seconds.
    wait_until(lambda: passes() >= after_commit + 3, timeout=30, message="three more passes")
    # On stdout, only the pass that did something: idle passes are in the log alone.
    summaries = [line for line in system.stdout if line.startswith("reconcile: ")]
    assert len(summaries) == 1 and summaries[0].startswith("reconcile: restored_ready=1 "), summaries
    assert system.terminate() == 0


INTERVAL = "--reconcile-interval must be greater than 0 and at most 315360000"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--concurrency=0", "--concurrency must be at least 1"),
        *(
            (f"--reconcile-interval={value}", f"{INTERVAL}, not {value}")
            for value in ("0", "-2", "nan", "inf")
        ),
        ("--bind=", "--bind: expected HOST:PORT (port 1-65535) or unix:PATH, not ''"),
        (
            "--bind=127.0.0.1:notaport",
            "--bind: expected HOST:PORT (port 1-65535) or unix:PATH, not '127.0.0.1:notaport'",
        ),
    ],
)
def test_a_bad_option_is_refused_before_any_child_starts(systems, option, message):
    system = systems("--no-admin-user", option)
    assert system.process.wait(timeout=120) == 1
    wait_until(lambda: any(message in line for line in system.stderr), timeout=10)
    assert f"CommandError: {message}" in system.stderr
    assert not any(line.startswith("Started ") for line in system.stdout)
