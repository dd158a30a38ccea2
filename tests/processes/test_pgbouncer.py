"""The real processes behind PgBouncer in transaction mode (docs/how-to/scale-out.md, "PgBouncer").

A PgBouncer of the test's own (``pool_mode = transaction``, as PgBouncer's documentation
describes it: a server connection belongs to a client only for one transaction) stands
between PostgreSQL and everything: the relay, a worker with two processes, and the test
itself, which enqueues, cancels and reads the outcomes through it. The processes run with
``DATABASE_PGBOUNCER=1`` and Django's own pool off, as the how-to says.

What transaction pooling cannot carry degrades as documented: a LISTEN would hear nothing,
so nothing LISTENs, the relay dispatches by polling and a running job's cancel lands at the
worker's next heartbeat; the worker name's lock, the one session lock, is held inside an
open transaction instead.

PgBouncer is Debian's package (``./dev test`` installs it as root); without it the tests
are skipped.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

import tests.probe.jobs  # noqa: F401 - registers the probe and wf.* handlers
from queue_app import services
from queue_app.engine.controls import set_queue_limits
from queue_app.models import Job, JobLog
from queue_app.runtime import worker_name
from queue_app.services import JobRequest, chain, enqueue_job, enqueue_workflow
from queue_app.states import Status
from tests.helpers import child_env, database_url, manage, wait_until
from tests.probe.models import Effect, Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

# Debian puts it in /usr/sbin, on the PATH of root only.
PGBOUNCER = shutil.which("pgbouncer", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Bouncer:
    port: int
    log: Path

    def unlinked_notifications(self) -> int:
        """Notifications PgBouncer got from a server connection no client held, and dropped
        (with a warning each): the sign of a LISTEN left on a pooled server connection."""
        return self.log.read_text().count("got packet 'A' from server when not linked")


@pytest.fixture
def pgbouncer():
    """A PgBouncer in transaction mode in front of the test database."""
    if PGBOUNCER is None:
        pytest.skip("pgbouncer is not installed: ./dev test installs it as root (apt-get install pgbouncer)")
    db = connection.settings_dict
    if str(db.get("HOST") or "").startswith("/"):
        pytest.skip(
            "the test database is reached over a Unix socket (the embedded server):"
            " pgbouncer runs as nobody, which cannot open it"
        )
    port = free_port()
    # World-readable: as root, PgBouncer refuses to run unless told to become another user.
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    folder.chmod(0o755)
    (folder / "users.txt").write_text(f'"{db["USER"]}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={db.get('HOST') or '127.0.0.1'} port={db.get('PORT') or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 20\nmax_client_conn = 200\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
    log = (folder / "pgbouncer.log").open("w")
    process = subprocess.Popen([PGBOUNCER, *as_user, str(folder / "pgbouncer.ini")], stdout=log, stderr=log)
    try:
        wait_until(lambda: _accepts(port) or process.poll() is not None, timeout=10, message="pgbouncer")
        assert process.poll() is None, (folder / "pgbouncer.log").read_text()
        yield Bouncer(port, folder / "pgbouncer.log")
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def pgbouncer_env(bouncer: Bouncer, **extra: str) -> dict[str, str]:
    """A child's environment with its DATABASE_URL through PgBouncer, set up as the how-to says."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@127.0.0.1:{bouncer.port}/{db['NAME']}"
    return child_env(DATABASE_URL=url, DATABASE_PGBOUNCER="1", DATABASE_POOL="0", **extra)


@pytest.fixture
def through_pgbouncer(transactional_db, relay_path, pgbouncer, settings):
    """The test's own connection goes through PgBouncer too, set up as DATABASE_PGBOUNCER=1
    sets it (no prepared statements, no server-side cursors, no Django pool); returns the
    environment for the processes. Put back before the test database is flushed."""
    env = pgbouncer_env(
        pgbouncer,
        JOBQUEUE_DISPATCH_ON_COMMIT="0",  # every job through the relay's outbox
        JOBQUEUE_RELAY_POLL_SECONDS="0.2",
        JOBQUEUE_HEARTBEAT_SECONDS="1",
    )
    db = connection.settings_dict
    saved = {key: db.get(key) for key in ("HOST", "PORT", "OPTIONS", "DISABLE_SERVER_SIDE_CURSORS")}
    _reconnect()
    options = {key: value for key, value in db["OPTIONS"].items() if key != "pool"}
    db.update(
        HOST="127.0.0.1",
        PORT=pgbouncer.port,
        OPTIONS={**options, "prepare_threshold": None},
        DISABLE_SERVER_SIDE_CURSORS=True,
    )
    settings.DATABASE_PGBOUNCER = True
    try:
        yield env
    finally:
        _reconnect()
        db.update(saved)


def _reconnect() -> None:
    connection.close()
    close_pool = getattr(connection, "close_pool", None)
    if close_pool is not None:
        close_pool()


def executions(job) -> list[int]:
    return sorted(Execution.objects.filter(job_id=job.id).values_list("attempt", flat=True))


def events(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))


def test_jobs_of_every_kind_settle_exactly_once_through_pgbouncer(through_pgbouncer, pgbouncer, processes):
    # Queue and key limits: the claim takes the queue's advisory xact lock and the keys'.
    set_queue_limits("default", concurrency_limit=2, key_concurrency_limit=1)

    succeeds = enqueue_job("probe.run")
    retried = enqueue_job("probe.run", {"fail_first": 1})
    fails = enqueue_job("probe.fail")
    atomic = enqueue_job("probe.effect")
    later = enqueue_job("probe.run", run_at=timezone.now() + timedelta(seconds=1))
    keyed = services.enqueue_jobs(
        [JobRequest("probe.run", {"sleep": 0.3}, concurrency_key="one-at-a-time") for _ in range(3)]
    )
    unique = [enqueue_job("probe.run", unique_key="just-one") for _ in range(2)]
    workflow = enqueue_workflow(chain(*(JobRequest("wf.add", {"value": value}) for value in (1, 10, 100))))
    steps = list(workflow.jobs.values())
    # Runs for a minute unless stopped, swallowing every exception but the stop.
    cancelled = enqueue_job("probe.steps", {"steps": 600, "step": 0.1})

    env = through_pgbouncer
    processes.append(manage("runrelay", env=env, stderr=subprocess.DEVNULL))
    processes.append(manage("runworker", "--concurrency=2", env=env, stderr=subprocess.DEVNULL))

    wait_until(lambda: executions(cancelled), timeout=60, message="the long job to start")
    assert services.cancel_job(cancelled.id).status == Status.CANCELLING

    settled = [succeeds, retried, fails, atomic, later, *keyed, unique[0], *steps, cancelled]
    wait_until(
        lambda: (
            not Job.objects.filter(id__in=[job.id for job in settled]).exclude(
                status__in=[Status.COMPLETED, Status.FAILED, Status.CANCELLED]
            )
        ),
        timeout=60,
        message="every job to settle",
    )
    status = dict(Job.objects.filter(id__in=[job.id for job in settled]).values_list("id", "status"))

    # Each reached its end once, through the attempts its kind takes.
    assert unique[1].id == unique[0].id and unique[1].was_duplicate
    for job in (succeeds, later, *keyed, unique[0], *steps):
        assert (status[job.id], executions(job)) == (Status.COMPLETED, [1])
    assert (status[retried.id], executions(retried)) == (Status.COMPLETED, [1, 2])
    assert (status[fails.id], executions(fails)) == (Status.FAILED, [1, 2, 3])
    assert status[atomic.id] == Status.COMPLETED
    assert list(Effect.objects.filter(job_id=atomic.id).values_list("attempt", flat=True)) == [1]
    assert Job.objects.get(id=steps[-1].id).result == 111
    # The cancel reached the running job (at a heartbeat: nothing LISTENs here).
    assert (status[cancelled.id], executions(cancelled)) == (Status.CANCELLED, [1])
    assert "cancel_confirmed" in events(cancelled)
    # One claim per execution, but for a claim handed back unstarted (a job claimed in one
    # batch behind the long job is released to an idle worker): no attempt was claimed twice.
    for job in settled:
        ran = len(executions(job)) if job is not atomic else Effect.objects.filter(job_id=job.id).count()
        trail = events(job)
        assert trail.count("claimed") == ran + trail.count("handed_back"), trail
    # No LISTEN was left on a pooled server connection, where each NOTIFY (one per enqueue
    # and cancel) would reach no client.
    assert pgbouncer.unlinked_notifications() == 0
    # The key's limit of one held across the two worker processes: no two of its runs overlapped.
    runs = sorted(
        Execution.objects.filter(job_id__in=[job.id for job in keyed]).values_list(
            "started_at", "finished_at"
        )
    )
    assert all(earlier[1] <= later_run[0] for earlier, later_run in zip(runs, runs[1:], strict=False))


def name_lock_held(name: str, direct_url: str) -> bool:
    """Whether a session holds the name's lock, seen by PostgreSQL itself (not through PgBouncer)."""
    with psycopg.connect(direct_url) as direct:
        row = direct.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objid = %s AND objsubid = 2",
            [worker_name.LOCK_CLASS, worker_name.lock_key(name) & 0xFFFFFFFF],
        ).fetchone()
        return row[0] > 0


def test_a_worker_name_is_refused_while_in_use_and_free_again_once_its_worker_stops(processes, pgbouncer):
    """Through transaction pooling a session lock would stay on the server connection after
    its worker stopped, and refuse the restart; held in an open transaction it goes with
    the worker, and still refuses a second worker of that name meanwhile."""
    direct_url = database_url()
    env = pgbouncer_env(pgbouncer)
    name = "pgbouncer-host"
    # The second and third rounds are restarts of a worker of the same name.
    for _ in range(3):
        first = manage("runworker", f"--name={name}", env=env, stderr=subprocess.DEVNULL)
        processes.append(first)
        wait_until(
            lambda: name_lock_held(name, direct_url), timeout=30, message="the worker to take its name"
        )

        second = manage("runworker", f"--name={name}", env=env, stderr=subprocess.PIPE, text=True)
        processes.append(second)
        try:
            _, stderr = second.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"a second worker named {name!r} was let run beside the first")
        assert second.returncode != 0
        assert f"a worker named {name!r} is already running" in stderr

        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0
        wait_until(lambda: not name_lock_held(name, direct_url), timeout=10, message="the name's lock to go")
