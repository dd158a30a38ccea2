"""Helpers shared by tests: run the relay and a worker in-process, wait on conditions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from queue_app.engine import execution
from queue_app.engine.execution import ClaimedJob
from queue_app.models import OutboxMessage
from queue_app.runtime.relay import Relay
from queue_app.runtime.worker import Worker

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def claim_jobs(ids: Sequence[str], *, worker_id: str) -> list[ClaimedJob]:
    """The jobs a worker's claim of ``ids`` takes (compare-and-set, queue controls honoured),
    without a worker around it; the ids it passes over are logged and dropped."""
    return execution.claim(ids, worker_id=worker_id).jobs


def relay_all() -> int:
    """Dispatch every pending outbox row to Redis."""
    return Relay().drain()


def run_worker(queues=("default",), worker_id="test-worker", slots: int | None = None) -> Worker:
    """Run one in-process worker until no queued job is left, with a relay thread beside it.

    Needs committed data (transactional tests): the relay has its own connection.
    """
    relay = Relay(poll_seconds=0.1)
    thread = threading.Thread(target=_relay_in_thread, args=(relay,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: not OutboxMessage.objects.filter(dispatched_at__isnull=True).exists())
        worker = Worker(
            worker_id=worker_id, queues=list(queues), burst=True, with_scheduled=True, slots=slots
        )
        worker.run()
    finally:
        relay.stopping = True
        thread.join(timeout=10)
    return worker


def hold_batch(worker: Worker, claimed) -> list:
    """Give ``worker`` a claimed batch as its loop would, the first job running in the main
    thread and the rest waiting to start; returns the attempts, in claim order."""
    attempts = worker.holdings.claimed(claimed)
    worker.current = worker.holdings.next_unstarted()
    return attempts


def _relay_in_thread(relay: Relay) -> None:
    try:
        relay.run()
    finally:
        connection.close()


class Events:
    """Collects a child's JSON log events from stderr as they come."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stderr:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def named(self, name: str) -> list[dict]:
        return [event for event in self.events if event["event"] == name]


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float = 30,
    interval: float = 0.05,
    message: str = "",
    ignoring: tuple[type[BaseException], ...] = (),
):
    """Poll ``condition`` until it returns something truthy, or fail after ``timeout``; an
    exception of ``ignoring`` (a server still starting, say) counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message or condition}")
        time.sleep(interval)


def database_url() -> str:
    """The URL of the test database (TCP or Unix socket), for a child process."""
    db = connection.settings_dict
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    if host.startswith("/"):
        return (
            f"postgres://{db['USER']}{password}@{quote(host, safe='')}:{db.get('PORT') or 5432}/{db['NAME']}"
        )
    return f"postgres://{db['USER']}{password}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess that must see the test database and Redis db."""
    url = database_url()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "DEBUG": "1",
        "LOG_FORMAT": "json",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra)
    return env


def python_json(args: Sequence[str], env: dict[str, str], timeout: float = 60) -> dict:
    """Run ``python *args`` from the project root in a fresh interpreter; the last line it
    prints is a JSON object, returned. Fails with the child's stderr when it fails."""
    done = subprocess.run(
        [sys.executable, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def manage(*args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    """Start ``manage.py <args>`` as a real OS process, in its own process group."""
    popen.setdefault("start_new_session", True)
    return subprocess.Popen(
        [sys.executable, str(PROJECT_ROOT / "manage.py"), *args],
        cwd=PROJECT_ROOT,
        env=env or child_env(),
        **popen,
    )


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL a started command and every process it started (e.g. worker children)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def ready_ids(client, queue: str = "default") -> list[str]:
    """The job ids in a queue's priority set, in pop order (members carry their enqueue time)."""
    from queue_app import broker

    return [broker.member_job_id(member) for member in client.zrange(broker.priority_key(queue), 0, -1)]


def ready_score(client, job_id, queue: str = "default") -> float | None:
    """A job's score in its queue's priority set (-priority), None when it is not there."""
    from queue_app import broker

    for member, score in client.zrange(broker.priority_key(queue), 0, -1, withscores=True):
        if broker.member_job_id(member) == str(job_id):
            return score
    return None


def listening_backends() -> set[int]:
    """Server pids of this database's sessions whose last statement was the relay's LISTEN,
    finished: a LISTEN still running (state 'active') registers only at its commit, and a
    NOTIFY sent before then never reaches it."""
    from queue_app.engine import sql

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s AND state = 'idle'",
            [sql.query("listen_outbox")],
        )
        return {row[0] for row in cursor.fetchall()}


def close_sync_to_async_connections() -> None:
    """Close the database connection of asgiref's shared thread, where a coroutine's
    ``sync_to_async`` calls ran: it outlives the test otherwise (and keeps the test
    database from being dropped)."""
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result()
