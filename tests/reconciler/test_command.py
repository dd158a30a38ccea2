"""``manage.py reconcile_queue`` as a real process: dry run, summary, logs, and store outages."""

from __future__ import annotations

import itertools
import json
import re
import signal
import subprocess
import threading
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queue_app import broker
from queue_app.engine import execution
from queue_app.engine.execution import Completion
from tests.helpers import child_env, claim_jobs, manage, ready_score, wait_until
from tests.reconciler.proxy import TcpProxy, postgres_proxy, postgres_via, redis_proxy, redis_via
from tests.reconciler.support import database_state, enqueue, mark_relayed, redis_state

# Jobs reach Redis through the relay, so "dispatched" means sent (no enqueuer push).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.redis,
    pytest.mark.usefixtures("relay_path"),
]

SUMMARY = re.compile(
    r"^reconcile: restored_ready=(\d+) restored_retry=(\d+) removed_stale=(\d+) requeued_expired=(\d+) "
    r"failed_expired=(\d+) expired=(\d+) skipped_relay_pending=(\d+) skipped_grace=(\d+) "
    r"skipped_unknown_queue=(\d+) "
    r"seconds=[\d.]+$"
)


def env(**extra: str) -> dict[str, str]:
    return child_env(JOBQUEUE_QUEUES="default,bulk:fifo", LOG_LEVEL="INFO", **extra)


class Running:
    """A started command whose stdout lines and JSON log events are collected as they come."""

    def __init__(self, *args: str, environment: dict[str, str]) -> None:
        self.process = manage(
            *args, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self.events: list[dict] = []
        threading.Thread(target=self._read, args=(self.process.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read_events, daemon=True).start()

    @staticmethod
    def _read(stream, into: list) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def _read_events(self) -> None:
        for line in self.process.stderr:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def named(self, event: str) -> list[dict]:
        return [e for e in self.events if e["event"] == event]

    def summaries(self) -> list[re.Match]:
        return [m for m in map(SUMMARY.match, self.lines) if m]

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def seed_every_case() -> dict[str, str]:
    """One of each thing a run repairs: a lost ready, retry and FIFO id, a stale id, an expired lease."""
    ready = enqueue(1)[0]
    waiting = enqueue(1, run_at=timezone.now() + timedelta(hours=1))[0]
    fifo = enqueue(1, queue="bulk")[0]
    finished = enqueue(1)[0]
    expired = enqueue(1)[0]
    mark_relayed()
    (claimed,) = claim_jobs([str(finished.id)], worker_id="w")
    execution.complete_jobs([Completion(claimed.id, claimed.fence, None)])
    claim_jobs([str(expired.id)], worker_id="dead")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            [expired.id],
        )
    client = broker.get_client()
    client.zadd(broker.priority_key("default"), {str(finished.id): 1})
    return {
        k: str(v.id)
        for k, v in dict(ready=ready, waiting=waiting, fifo=fifo, finished=finished, expired=expired).items()
    }


def test_dry_run_prints_what_it_would_do_and_changes_nothing(redis_client):
    ids = seed_every_case()
    before = (database_state(), redis_state(redis_client))

    result = manage("reconcile_queue", "--dry-run", env=env(), stdout=subprocess.PIPE, text=True)
    out, _ = result.communicate(timeout=60)

    assert result.returncode == 0, out
    lines = out.splitlines()
    assert (
        f"would restore to the ready structure: job_id={ids['ready']} queue=default structure=priority"
        in "\n".join(lines)
    )
    assert any(line.startswith(f"would restore to the retry set: job_id={ids['waiting']}") for line in lines)
    assert any(
        line.startswith(
            f"would restore to the ready structure: job_id={ids['fifo']} queue=bulk structure=fifo"
        )
        for line in lines
    )
    assert any(line.startswith(f"would remove a stale id: job_id={ids['finished']}") for line in lines)
    assert any(line.startswith(f"would requeue (lease expired): job_id={ids['expired']}") for line in lines)
    assert lines[-1].startswith(
        "reconcile dry run (nothing changed): restored_ready=2 restored_retry=1 removed_stale=1 "
        "requeued_expired=1 failed_expired=0 "
    )
    assert (database_state(), redis_state(redis_client)) == before


def test_a_run_repairs_prints_one_summary_line_and_logs_each_change(redis_client):
    ids = seed_every_case()

    result = manage("reconcile_queue", env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = result.communicate(timeout=60)

    assert result.returncode == 0, err
    assert len(out.splitlines()) == 1
    match = SUMMARY.match(out.strip())
    assert match, out
    # 2 ready + 1 retry restored, 1 stale removed, 1 rescued; the rescued job's row is the relay's.
    assert match.groups() == ("2", "1", "1", "1", "0", "0", "1", "0", "0")
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    changes = {
        (e["event"], e["job_id"]) for e in events if e["event"].startswith("reconcile_") and "job_id" in e
    }
    assert {
        ("reconcile_restored_ready", ids["ready"]),
        ("reconcile_restored_ready", ids["fifo"]),
        ("reconcile_restored_retry", ids["waiting"]),
        ("reconcile_removed_stale", ids["finished"]),
        ("reconcile_requeued_expired", ids["expired"]),
    } <= changes
    assert ready_score(redis_client, ids["ready"]) is not None
    assert ready_score(redis_client, ids["finished"]) is None
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == [ids["fifo"]]
    assert redis_client.zscore(broker.retry_key("default"), ids["waiting"]) is not None


def _outage_then_recovery(proc: Running, proxy: TcpProxy, redis_client, job_id: str, interval: float) -> None:
    """While the store is down the loop stays up and logs at most once per interval; once it is
    back, the loop repairs Redis by itself."""
    seen = len(proc.named("store_unavailable"))
    wait_until(lambda: len(proc.named("store_unavailable")) >= seen + 3, timeout=30, message="failures")
    assert proc.process.poll() is None, "the loop must keep running while the store is down"
    logged = proc.named("store_unavailable")[seen:]
    assert all(e["process"] == "reconciler" for e in logged)
    stamps = [datetime.fromisoformat(e["timestamp"]) for e in logged]
    assert min((b - a).total_seconds() for a, b in itertools.pairwise(stamps)) >= interval * 0.9
    assert [e["consecutive_failures"] for e in logged] == sorted({e["consecutive_failures"] for e in logged})
    assert ready_score(redis_client, job_id) is None
    recovered = len(proc.named("store_available_again"))
    summaries = len(proc.summaries())

    proxy.start()
    wait_until(
        lambda: ready_score(redis_client, job_id) is not None,
        timeout=60,
        message="the job is restored once the store is back",
    )
    wait_until(
        lambda: len(proc.named("store_available_again")) > recovered, timeout=30, message="recovery log"
    )
    wait_until(lambda: len(proc.summaries()) > summaries, timeout=30, message="a summary line")
    assert proc.process.poll() is None


def test_loop_rides_out_a_redis_outage_and_resumes_by_itself(redis_client):
    job_id = str(enqueue(1)[0].id)
    mark_relayed()
    proxy = redis_proxy(child_env()["REDIS_URL"])  # not listening yet: Redis is "down"
    interval = 0.5
    proc = Running(
        "reconcile_queue",
        "--loop",
        f"--interval={interval}",
        environment=env(REDIS_URL=redis_via(child_env()["REDIS_URL"], proxy)),
    )
    try:
        _outage_then_recovery(proc, proxy, redis_client, job_id, interval)
        # A second outage, this time cutting live connections mid-loop.
        proxy.stop()
        redis_client.flushdb()
        _outage_then_recovery(proc, proxy, redis_client, job_id, interval)
        assert proc.stop() == 0
        assert proc.named("reconciler_stopped")
    finally:
        proc.kill()
        proxy.stop()


def test_loop_rides_out_a_postgres_outage_and_resumes_by_itself(redis_client):
    job_id = str(enqueue(1)[0].id)
    mark_relayed()
    db = connection.settings_dict
    proxy = postgres_proxy(db)
    interval = 0.5
    proc = Running(
        "reconcile_queue",
        "--loop",
        f"--interval={interval}",
        environment=env(DATABASE_URL=postgres_via(db, proxy), DATABASE_POOL_TIMEOUT="1"),
    )
    try:
        _outage_then_recovery(proc, proxy, redis_client, job_id, interval)
        # A restart of PostgreSQL: pooled connections die under the loop.
        proxy.stop()
        redis_client.flushdb()
        _outage_then_recovery(proc, proxy, redis_client, job_id, interval)
        assert proc.stop() == 0
    finally:
        proc.kill()
        proxy.stop()
