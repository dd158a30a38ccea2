"""``runrelay --once`` / ``--batch-size``, ``reconcile_queue --batch-size`` and ``runworker
--queues`` as real commands."""

from __future__ import annotations

import json
import re
import subprocess
import threading

import pytest
from django.db import connection

from queue_app import broker
from queue_app.models import OutboxMessage
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import child_env, kill_group, manage, ready_ids
from tests.reconciler.proxy import free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    process = manage(*args, env=child_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def log_events(stderr: str, name: str) -> list[dict]:
    events = (json.loads(line) for line in stderr.splitlines() if line.startswith("{"))
    return [event for event in events if event["event"] == name]


def test_relay_once_drains_in_batches_of_the_given_size_and_exits(redis_client, relay_path):
    jobs = enqueue_jobs([JobRequest(type="demo.echo") for _ in range(30)])
    done = run("runrelay", "--once", "--batch-size=7", LOG_LEVEL="DEBUG")
    assert done.returncode == 0
    assert done.stdout.strip() == "relay stopped: 30 outbox rows dispatched"
    assert [e["count"] for e in log_events(done.stderr, "outbox_dispatched")] == [7, 7, 7, 7, 2]
    assert not OutboxMessage.objects.filter(dispatched_at__isnull=True).exists()
    ready = ready_ids(redis_client)
    assert sorted(ready) == sorted(str(job.id) for job in jobs)


def test_relay_once_with_nothing_to_send_exits_at_once():
    done = run("runrelay", "--once")
    assert done.returncode == 0
    assert done.stdout.strip() == "relay stopped: 0 outbox rows dispatched"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--batch-size=0", "--batch-size must be at least 1"),
        ("--batch-size=-5", "--batch-size must be at least 1"),
        ("--poll=0", "--poll must be greater than 0"),
        ("--poll=-1", "--poll must be greater than 0"),
        ("--poll=nan", "--poll must be greater than 0 and at most 315360000, not nan"),
        ("--poll=inf", "--poll must be greater than 0 and at most 315360000, not inf"),
        ("--poll=1e300", "--poll must be greater than 0 and at most 315360000, not 1e+300"),
    ],
)
def test_relay_rejects_a_bad_option_naming_it(option, message):
    enqueue_job("demo.echo")
    done = run("runrelay", "--once", option)
    assert done.returncode == 1
    assert f"CommandError: {message}" in done.stderr and "Traceback" not in done.stderr
    assert OutboxMessage.objects.filter(dispatched_at__isnull=True).count() == 1


def test_relay_once_with_redis_down_exits_with_the_error_instead_of_waiting():
    enqueue_jobs([JobRequest(type="demo.echo") for _ in range(3)])
    relay = manage(
        "runrelay",
        "--once",
        env=child_env(REDIS_URL=f"redis://127.0.0.1:{free_port()}/6"),  # nothing listens there
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = relay.communicate(timeout=60)
    finally:
        kill_group(relay)
    assert relay.returncode == 1
    assert "CommandError: relay failed, a store is unreachable: ConnectionError" in stderr
    assert "Traceback" not in stderr and "relay stopped" not in stdout
    assert OutboxMessage.objects.filter(dispatched_at__isnull=True).count() == 3


class Monitor:
    """Redis MONITOR, keeping the commands sent to one database until a marker is seen."""

    def __init__(self, client, db: int) -> None:
        self.client, self.db = client, db
        self.commands: list[str] = []
        self.marker = "test-monitor-end"
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _read(self) -> None:
        with self.client.monitor() as monitor:
            self._ready.set()
            while True:
                entry = monitor.next_command()
                if entry["db"] != self.db:
                    continue
                if self.marker in entry["command"]:
                    return
                self.commands.append(entry["command"])

    def stop(self) -> list[str]:
        self.client.echo(self.marker)
        self._thread.join(timeout=30)
        return self.commands


def test_reconcile_batch_size_pages_the_jobs_and_still_repairs_everything(redis_client, relay_path):
    jobs = enqueue_jobs([JobRequest(type="demo.echo") for _ in range(10)])
    with connection.cursor() as cursor:  # relayed long ago, then lost with Redis
        cursor.execute("UPDATE queue_app_job_outbox SET dispatched_at = now() - interval '1 hour'")
    stale = [f"00000000-0000-4000-8000-{n:012d}" for n in range(6)]
    redis_client.zadd(broker.priority_key("default"), dict.fromkeys(stale, 1))
    db = redis_client.connection_pool.connection_kwargs["db"]
    monitor = Monitor(redis_client, db)
    done = run("reconcile_queue", "--batch-size=4")
    commands = monitor.stop()
    assert done.returncode == 0, done.stderr
    assert re.match(r"^reconcile: restored_ready=10 restored_retry=0 removed_stale=6 ", done.stdout)
    assert sorted(ready_ids(redis_client)) == sorted(str(job.id) for job in jobs)
    # Membership is looked up one page of at most 4 jobs at a time.
    lookups = [c.split() for c in commands if c.startswith("ZMSCORE queue:{default}:priority ")]
    assert [len(lookup) - 2 for lookup in lookups] == [4, 4, 2]


@pytest.mark.parametrize("interval", ["nan", "inf", "1e300"])
def test_reconcile_loop_rejects_an_interval_that_is_not_a_finite_number_of_seconds(interval):
    done = run("reconcile_queue", "--loop", f"--interval={interval}")
    assert done.returncode == 1
    assert "CommandError: --interval must be greater than 0 and at most 315360000" in done.stderr
    assert "Traceback" not in done.stderr and "reconcile:" not in done.stdout


def test_reconcile_rejects_a_batch_size_below_one():
    done = run("reconcile_queue", "--batch-size=0")
    assert done.returncode == 1
    assert "CommandError: --batch-size must be at least 1" in done.stderr


@pytest.mark.parametrize("queues", ["", ",", " , "])
def test_worker_refuses_a_queue_list_naming_no_queue(queues):
    # Not read as "every queue", nor left to crash the worker processes, restarted forever.
    worker = manage(
        "runworker",
        "--burst",
        f"--queues={queues}",
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _, stderr = worker.communicate(timeout=60)
    finally:
        kill_group(worker)
    assert worker.returncode == 1
    assert "CommandError: --queues: name at least one queue; configured: default" in stderr.decode()
