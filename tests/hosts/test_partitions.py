"""Many hosts, tested as many hosts: network partitions between namespaced hosts.

PostgreSQL and Redis run in one network namespace, and two app hosts, each in a
namespace of its own, run a relay, a worker and the reconciler loop, all on one
private bridge (tests/hosts/network.py). The test then cuts links as a network
would, dropping packets both ways with no error to either side:

1. host-a loses PostgreSQL while it runs a job: the lease runs out, the job is
   rescued and completed on host-b while host-a is still cut; once healed,
   host-a's own late completion is fenced (nothing of it is written).
2. host-a loses Redis only: the rest of the system carries on, host-a's running
   job is completed by host-a itself through PostgreSQL (its leases never wait on
   Redis), and every job completes after the heal.
3. host-b, a relay host, drops off the network whole (its switch port down)
   while it relays and runs a job: host-a's relay carries the outbox, host-a's
   worker runs the rescued job, and host-b's late completion is fenced.

Then every process is stopped cleanly and the chaos run's invariants
(scripts/chaoslib/invariants.py) are checked over PostgreSQL, Redis and the
execution journal: each job ran to completion exactly once (its side effect
written once, by its last attempt), no claim ran twice, no two executions
overlapped unless the first had lost its lease, every log trail follows the
state machine, and Redis agrees with PostgreSQL.

Fencing tokens as the answer to a paused or partitioned lease holder follow
Kleppmann, "How to do distributed locking" (2016), and Jepsen's partition tests
(cutting links between real hosts, then checking the history) are the model
for the method.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queue_app.states import COMPLETION_FENCED, FAILURE_FENCED, HEARTBEAT_FENCED
from tests.helpers import PROJECT_ROOT, wait_until
from tests.hosts.deployment import Deployment
from tests.hosts.network import Network
from tests.hosts.stores import Stores

pytestmark = pytest.mark.processes

LEASE_SECONDS = 2.0
# A job long enough to be caught running, and that sleeps on through the lease-lost
# interrupt (as a handler in C code would): its completion then reaches PostgreSQL late.
STUBBORN = {"sleep": 3, "stubborn": True}
# The rows that say a late write of an attempt was turned away by its fence.
FENCED_EVENTS = (COMPLETION_FENCED, FAILURE_FENCED, HEARTBEAT_FENCED)
# Long enough for several lease times, a rescue and the rescued job's run elsewhere.
RESCUE_TIMEOUT = 60


def environment(run_folder: Path, database_url: str, redis_url: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "REDIS_TEST_DB": "15",
        "DEBUG": "1",
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        "JOBSITE_ENV_FILE": "",
        "PROBE_JOURNAL_DIR": str(run_folder / "journal"),
        # As in production (the suite's fixtures turn it off for tests that do not use Redis).
        "JOBQUEUE_DISPATCH_ON_COMMIT": "1",
        "JOBQUEUE_LEASE_SECONDS": str(LEASE_SECONDS),
        "JOBQUEUE_HEARTBEAT_SECONDS": str(LEASE_SECONDS / 4),
        "JOBQUEUE_LEASE_RESCUE_SECONDS": "1",
        "JOBQUEUE_RECONCILE_GRACE_SECONDS": "1",
        "JOBQUEUE_RELAY_POLL_SECONDS": "0.5",
        "JOBQUEUE_RELAY_CLAIM_SECONDS": "2",
        "JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS": "0.3",
        "JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS": "2",
        "JOBQUEUE_SHUTDOWN_GRACE_SECONDS": "5",
        "DATABASE_POOL_TIMEOUT": "2",
    }
    for name in ("PYTEST_XDIST_WORKER", "JOBSITE_FAILPOINTS"):
        env.pop(name, None)
    return env


class Site:
    """The running system as the test sees it: the hosts, the stores (read over their Unix
    sockets), the journal, and the control commands (tests/hosts/control.py)."""

    def __init__(self, network: Network, stores: Stores, run_folder: Path) -> None:
        self.network = network
        self.stores = stores
        self.folder = run_folder
        (run_folder / "journal").mkdir()
        self.local_env = environment(run_folder, stores.local_database_url, stores.local_redis_url)
        self.db = stores.connect()

    def control(self, *args: str, **env: str) -> object:
        done = subprocess.run(
            [sys.executable, "-m", "tests.hosts.control", args[0], str(self.folder), *args[1:]],
            cwd=PROJECT_ROOT,
            env={**self.local_env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def enqueue(self, phase: str, count: int, payload: dict, *, outbox_only: bool = False) -> list[str]:
        """Jobs through the service layer; ``outbox_only``: no push after the commit, so only a
        relay (or the reconciler) brings them to Redis."""
        env = {"JOBQUEUE_DISPATCH_ON_COMMIT": "0"} if outbox_only else {}
        return self.control("enqueue", phase, str(count), json.dumps(payload), **env)

    def rows(self, query: str, *params) -> list[tuple]:
        return self.db.execute(query, params).fetchall()

    def started_on(self, host: str) -> list[tuple[str, int]]:
        """(job id, fence) of the attempts running on ``host`` whose handler has started."""
        running = self.rows(
            "SELECT id::text, fence FROM queue_app_jobs WHERE status = 'processing' AND worker_id LIKE %s",
            f"{host}/%",
        )
        started = {(e["job"], e["fence"]) for e in self.journal()}
        return [attempt for attempt in running if attempt in started]

    def journal(self) -> list[dict]:
        from chaoslib import journal

        return journal.read(self.folder / "journal")

    def all_completed(self, ids: list[str]) -> bool:
        [(done,)] = self.rows(
            "SELECT count(*) FROM queue_app_jobs WHERE id = ANY(%s::uuid[]) AND status = 'completed'", ids
        )
        return done == len(ids)

    def completed_by(self, job_id: str) -> str | None:
        """The worker whose claim completed the job, None while it is not completed."""
        found = self.rows(
            "SELECT l.extra->>'worker' FROM queue_app_jobs j JOIN queue_app_job_logs l ON l.job_id = j.id"
            " WHERE j.id = %s AND j.status = 'completed' AND l.event = 'claimed'"
            " AND (l.extra->>'fence')::bigint = j.fence",
            job_id,
        )
        return found[0][0] if found else None

    def events(self, job_id: str, event: str) -> list[dict]:
        return [
            row[0]
            for row in self.rows(
                "SELECT extra FROM queue_app_job_logs WHERE job_id = %s AND event = %s", job_id, event
            )
        ]

    def rescued_and_completed_on(self, attempts: list[tuple[str, int]], host: str) -> bool:
        return all(
            self.events(job_id, "lease_expired_requeued")
            and (self.completed_by(job_id) or "").startswith(f"{host}/")
            for job_id, _ in attempts
        )

    def late_attempts_turned_away(self, attempts: list[tuple[str, int]]) -> set[str] | None:
        """The executions of these attempts once each has ended (its handler ran on, cut off)
        and PostgreSQL turned away a write of its attempt (its completion, failure or
        heartbeat, whichever came first after the heal); None until then."""
        executions = {(e["job"], e["fence"]): e for e in self.journal()}
        late = [executions.get(attempt) for attempt in attempts]
        if any(execution is None or execution["ended_at"] is None for execution in late):
            return None
        for job_id, fence in attempts:
            fenced = self.rows(
                "SELECT 1 FROM queue_app_job_logs WHERE job_id = %s AND event = ANY(%s)"
                " AND (extra->>'fence')::bigint = %s",
                job_id,
                list(FENCED_EVENTS),
                fence,
            )
            if not fenced:
                return None
        return {execution["execution"] for execution in late}

    def results_written_by(self, executions: set[str]) -> set[str]:
        found = self.rows(
            "SELECT result->>'execution' FROM queue_app_jobs WHERE result->>'execution' = ANY(%s)",
            list(executions),
        )
        return {row[0] for row in found}

    def undispatched(self) -> int:
        return self.rows("SELECT count(*) FROM queue_app_job_outbox WHERE dispatched_at IS NULL")[0][0]


@pytest.fixture
def site(network, stores, run_folder, monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))
    site = Site(network, stores, run_folder)
    migrate = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "manage.py"), "migrate", "-v0"],
        cwd=PROJECT_ROOT,
        env=site.local_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    yield site
    site.db.close()
    sys.modules.pop("chaoslib.journal", None)


@pytest.fixture
def deployment(site):
    hosts = [site.network.add_host(name) for name in ("host-a", "host-b")]
    env = environment(site.folder, site.stores.database_url, site.stores.redis_url)
    running = Deployment(env, site.folder / "logs")
    try:
        for host in hosts:
            running.start(host)
        yield running
    finally:
        running.kill()


def test_jobs_survive_partitions_between_hosts_exactly_once(site, deployment):
    network, stores = site.network, site.stores
    store_host, host_a, host_b = (network.hosts[name] for name in ("stores", "host-a", "host-b"))

    # 1. host-a cut off from PostgreSQL while it runs a job.
    site.enqueue("postgres-cut", 6, STUBBORN)
    held = wait_until(lambda: site.started_on("host-a"), timeout=60, message="host-a to run a job")
    network.cut(host_a, store_host, stores.postgres_address)
    wait_until(
        lambda: site.rescued_and_completed_on(held, "host-b"),
        timeout=RESCUE_TIMEOUT,
        message=f"host-a's jobs {held} to be rescued and completed on host-b while host-a is cut",
    )
    network.heal(host_a, store_host, stores.postgres_address)
    late = wait_until(
        lambda: site.late_attempts_turned_away(held),
        timeout=RESCUE_TIMEOUT,
        message="host-a's late attempt to end and be turned away by its fence",
    )
    assert site.results_written_by(late) == set(), "a fenced execution's result was written"

    # 2. host-a cut off from Redis only: the rest carries on; PostgreSQL settles its running job.
    site.enqueue("redis-cut", 4, {"sleep": 1.5})
    held = wait_until(lambda: site.started_on("host-a"), timeout=60, message="host-a to run a job")
    network.cut(host_a, store_host, stores.redis_address)
    during = site.enqueue("redis-cut-during", 4, {"sleep": 0.2})
    wait_until(
        lambda: site.all_completed(during),
        timeout=RESCUE_TIMEOUT,
        message="jobs enqueued while host-a has no Redis to complete elsewhere",
    )
    wait_until(
        lambda: site.all_completed([job_id for job_id, _ in held]),
        timeout=RESCUE_TIMEOUT,
        message="host-a's running job to be settled while host-a has no Redis",
    )
    network.heal(host_a, store_host, stores.redis_address)

    # 3. host-b, a relay host, off the network whole while it relays and runs a job.
    site.enqueue("host-cut", 4, STUBBORN, outbox_only=True)
    held = wait_until(lambda: site.started_on("host-b"), timeout=60, message="host-b to run a job")
    network.unplug(host_b)
    during = site.enqueue("host-cut-during", 4, {"sleep": 0.2}, outbox_only=True)
    wait_until(
        lambda: site.rescued_and_completed_on(held, "host-a"),
        timeout=RESCUE_TIMEOUT,
        message=f"host-b's jobs {held} to be rescued and completed on host-a",
    )
    wait_until(
        lambda: site.all_completed(during),
        timeout=RESCUE_TIMEOUT,
        message="jobs sent through the outbox while host-b is off to be relayed and run on host-a",
    )
    network.plug(host_b)
    late = wait_until(
        lambda: site.late_attempts_turned_away(held),
        timeout=RESCUE_TIMEOUT,
        message="host-b's late attempt to end and be turned away by its fence",
    )
    assert site.results_written_by(late) == set(), "a fenced execution's result was written"

    # Healed: everything settles, the relays drain the outbox, no process gave up.
    every_job = [row[0] for row in site.rows("SELECT id::text FROM queue_app_jobs")]
    wait_until(lambda: site.all_completed(every_job), timeout=RESCUE_TIMEOUT, message="every job to complete")
    wait_until(lambda: site.undispatched() == 0, timeout=30, message="the relays to drain the outbox")
    assert deployment.exited() == [], "a process exited during the partitions"
    stops = deployment.stop()
    assert [item for item in stops if item[1] != 0] == [], f"unclean stops: {stops}"

    results = {result["name"]: result for result in site.control("check", str(LEASE_SECONDS))}
    failed = [result for result in results.values() if not result["passed"]]
    assert failed == [], json.dumps(failed, indent=1)
    # Not vacuous: the checks saw every job and every execution, reruns of the rescued ones among them.
    executions = site.journal()
    assert len(executions) > len(every_job)
    assert results["effect_exactly_once_per_completed_job"]["checked"] == len(every_job)
    assert results["no_two_executions_overlap"]["checked"] == len(executions)
    assert results["one_execution_per_claim"]["checked"] == len(executions)
    assert results["log_trail_is_a_valid_path"]["checked"] == len(every_job)
    assert "redis_agrees_after_one_reconcile" in results
