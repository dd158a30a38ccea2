"""The chaos run: the whole system as real processes, seeded faults, then the queue's invariants.

    .venv/bin/python scripts/chaos.py --short                  # CI form: 400 jobs, about 2 minutes
    .venv/bin/python scripts/chaos.py --jobs 5000 --duration 600 --seed 7
    .venv/bin/python scripts/chaos.py --seed 7 --plan          # print the fault plan only

It starts a web server, relays (armed with the ``relay.after_push``
failpoint), workers (armed with ``worker.after_pop``) and the reconciler as
``manage.py`` processes, submits jobs (poison jobs among them) through the
service layer and the API while a seeded schedule injects faults (SIGKILL of
workers, worker processes, relays and the reconciler; SIGSTOP of a worker
past its lease; SIGTERM of a worker mid-job; FLUSHDB; Redis and PostgreSQL
restarts; stale and duplicate ids pushed into Redis), then stops the faults, lets the
system settle, and checks the invariants (scripts/chaoslib/invariants.py).
It prints the figures and exits 1 when an invariant fails.

Stores: by default the run starts its own PostgreSQL and Redis in a
temporary folder (so it may restart them); ``--stores given`` uses
DATABASE_URL / REDIS_URL (or the embedded servers) with a fresh database and
Redis db ``--redis-db``, and leaves the restart faults out. The run folder
(logs of every process, the fault log, the execution journal, the report) is
kept when an invariant fails or with ``--keep``.

Over 500 lines on purpose: the run's phases, in the order they run, read top to
bottom here; the machinery of each (processes, faults, stores, clients,
invariants, the report) is in chaoslib/.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chaoslib import clients, controls, invariants, journal, report, schedule, workflows  # noqa: E402
from chaoslib.faults import Injector  # noqa: E402
from chaoslib.processes import Cast, free_port, wait_for  # noqa: E402
from chaoslib.stores import DedicatedStores, GivenStores  # noqa: E402

# "keyed" holds the jobs with a concurrency key, under a per-key limit (chaoslib/controls.py).
QUEUES = {"default": False, "bulk": True, controls.KEYED_QUEUE: False}
RECONCILE_GRACE_SECONDS = 2.0
# Jobs submitted after the workers stopped, so the final Redis check has ready ids to verify.
TAIL_JOBS = 30
# How long the relays get to drain the outbox at each check point.
DRAIN_TIMEOUT_SECONDS = 30.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--short", action="store_true", help="the CI form: 400 jobs, 60 s of faults")
    parser.add_argument("--jobs", type=int, default=400, help="jobs to submit (default 400)")
    parser.add_argument(
        "--duration", type=float, default=60.0, help="seconds of the fault phase (default 60)"
    )
    parser.add_argument("--seed", type=int, help="seed of the fault plan and the jobs (default: random)")
    parser.add_argument("--mean-gap", type=float, default=2.5, help="mean seconds between faults (2.5)")
    parser.add_argument("--workers", type=int, default=3, help="runworker processes (default 3)")
    parser.add_argument("--relays", type=int, default=2, help="runrelay processes (default 2)")
    parser.add_argument("--lease", type=float, default=3.0, help="JOBQUEUE_LEASE_SECONDS of the run (3)")
    parser.add_argument(
        "--failpoint",
        type=float,
        default=0.05,
        help="chance a relay kills itself after a push (default 0.05)",
    )
    parser.add_argument(
        "--pop-failpoint",
        type=float,
        default=0.03,
        help="chance a worker process kills itself between a pop and its claim (default 0.03)",
    )
    parser.add_argument(
        "--stores",
        choices=["dedicated", "given"],
        default="dedicated",
        help="dedicated: start a PostgreSQL and a Redis of the run's own (default); given: use"
        " DATABASE_URL / REDIS_URL (or the embedded servers), without the restart faults",
    )
    parser.add_argument("--redis-db", type=int, default=7, help="Redis database number (default 7)")
    parser.add_argument(
        "--settle-timeout",
        type=float,
        help="seconds after the faults for every job to end (default 120, or 0.12 per job"
        " when more: the long form leaves a backlog of about a thousand jobs to drain)",
    )
    parser.add_argument(
        "--min-faults-per-kind",
        type=int,
        default=1,
        help="faults of each planned kind that must be applied, or the run fails (default 1)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run folder and database")
    parser.add_argument("--plan", action="store_true", help="print the fault plan and exit")
    args = parser.parse_args(argv)
    if args.short:
        args.jobs, args.duration = 400, 60.0
    if args.redis_db in (0, 14, 15):
        parser.error("--redis-db: 0, 14 and 15 belong to others (the default db and the test suite's)")
    if args.workers < 1 or args.relays < 1 or args.jobs < 1:
        parser.error("--workers, --relays and --jobs must be at least 1")
    if args.settle_timeout is None:
        args.settle_timeout = max(120.0, 0.12 * args.jobs)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big") % 1_000_000
    return args


def fault_plan(args: argparse.Namespace) -> list[schedule.Fault]:
    return schedule.plan(
        args.seed,
        duration=args.duration,
        mean_gap=args.mean_gap,
        workers=args.workers,
        relays=args.relays,
        lease_seconds=args.lease,
        restarts=args.stores == "dedicated",
    )


def child_env(args: argparse.Namespace, stores, folder: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": stores.database_url,
        "REDIS_URL": stores.redis_url,
        "REDIS_TEST_DB": str(args.redis_db),
        "DEBUG": "1",
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        # A child that does not stop in time gets SIGABRT first: every thread's stack in its log.
        "PYTHONFAULTHANDLER": "1",
        "PROBE_JOURNAL_DIR": str(folder / "journal"),
        "JOBQUEUE_QUEUES": ",".join(f"{q}:fifo" if fifo else q for q, fifo in QUEUES.items()),
        "JOBQUEUE_LEASE_SECONDS": str(args.lease),
        "JOBQUEUE_HEARTBEAT_SECONDS": str(args.lease / 3),
        "JOBQUEUE_RECONCILE_GRACE_SECONDS": str(RECONCILE_GRACE_SECONDS),
        "JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS": "0.3",
        "JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS": "2",
        "JOBQUEUE_RELAY_POLL_SECONDS": "1",
        # A killed relay's rows go to another relay this long after its claim: well inside
        # DRAIN_TIMEOUT_SECONDS (the default, 45 s, is not).
        "JOBQUEUE_RELAY_CLAIM_SECONDS": "2",
        "JOBQUEUE_SHUTDOWN_GRACE_SECONDS": "5",
    }
    env.pop("JOBSITE_FAILPOINTS", None)
    return env


def build_cast(args: argparse.Namespace, folder: Path, env: dict[str, str], port: int) -> Cast:
    cast = Cast(folder)
    cast.add("web", "web", ["runserver", "--noreload", "--skip-checks", f"127.0.0.1:{port}"], env)
    relay_env = {**env, "JOBSITE_FAILPOINTS": f"relay.after_push=kill@{args.failpoint}"}
    for index in range(args.relays):
        cast.add(f"relay-{index}", "relay", ["runrelay"], relay_env if args.failpoint > 0 else env)
    # A worker process that kills itself after a pop leaves the ids in the in-flight set;
    # its supervisor starts a new process, and a sweep must give the ids back.
    worker_env = {**env, "JOBSITE_FAILPOINTS": f"worker.after_pop=kill@{args.pop_failpoint}"}
    for index in range(args.workers):
        # The first supervisor runs two worker processes, the others one.
        concurrency = "2" if index == 0 else "1"
        cast.add(
            f"worker-{index}",
            "worker",
            ["runworker", "--name", f"chaos-w{index}", "--concurrency", concurrency],
            worker_env if args.pop_failpoint > 0 else env,
        )
    cast.add("reconciler", "reconciler", ["reconcile_queue", "--loop", "--interval", "1"], env)
    return cast


def with_database(action, *, timeout: float = 120.0):
    """Run a database action from this process, riding out a PostgreSQL restart."""
    from django.db import DatabaseError, InterfaceError, connection

    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except (DatabaseError, InterfaceError):
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def setup_django(env: dict[str, str]) -> str:
    """Migrate the fresh database and create the API client's staff user; returns its token."""
    os.environ.update(env)
    os.environ["LOG_LEVEL"] = "ERROR"  # this process's own service calls stay quiet
    # This process (the injector, the clients, the checks) connects directly: while PostgreSQL
    # is down it must fail at once, not wait for a pool that is backing off its reconnects.
    os.environ["DATABASE_POOL"] = "0"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    call_command("migrate", verbosity=0)
    from queue_app.services import set_queue_limits

    set_queue_limits(controls.KEYED_QUEUE, key_concurrency_limit=controls.KEY_CONCURRENCY_LIMIT)
    user = get_user_model().objects.create_user("chaos", is_staff=True)
    return Token.objects.create(user=user).key


def health(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/api/health/")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False


def count_unsettled() -> int:
    """Jobs not yet terminal (waiting workflow steps among them), leaving out those scheduled
    far ahead on purpose."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM queue_app_jobs"
            " WHERE status IN ('waiting', 'queued', 'processing', 'cancelling')"
            " AND NOT coalesce((payload->>'far')::bool, false)"
        )
        return cursor.fetchone()[0]


def undispatched() -> int:
    from queue_app.models import OutboxMessage

    return OutboxMessage.objects.filter(dispatched_at__isnull=True).count()


def ids_for_stale_pushes() -> dict[str, list[str]]:
    from django.db import DatabaseError, InterfaceError, connection

    from queue_app.models import Job

    def read():
        queued = Job.objects.filter(status="queued").order_by("id").values_list("id", flat=True)[:200]
        finished = (
            Job.objects.filter(status__in=["completed", "failed", "cancelled"])
            .order_by("id")
            .values_list("id", flat=True)[:200]
        )
        waiting = Job.objects.filter(status="waiting").order_by("id").values_list("id", flat=True)[:200]
        return {
            "queued": [str(i) for i in queued],
            "finished": [str(i) for i in finished],
            "waiting": [str(i) for i in waiting],
        }

    try:
        return read()
    except (DatabaseError, InterfaceError):
        connection.close()  # PostgreSQL is down: push unknown ids only
        return {"queued": [], "finished": [], "waiting": []}


def busy_worker_names() -> set[str]:
    """The --name of every runworker holding a job right now (empty while PostgreSQL is down)."""
    from django.db import DatabaseError, InterfaceError, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT split_part(worker_id, '/', 1) FROM queue_app_jobs"
                " WHERE status = 'processing'"
            )
            return {row[0] for row in cursor.fetchall()}
    except (DatabaseError, InterfaceError):
        connection.close()
        return set()


def long_jobs_by_worker(min_sleep: float = 0.5, stubborn: bool = False) -> dict[str, tuple[str, int, float]]:
    """runworker --name -> (job id, fence, claim time in epoch seconds) of a job it runs that
    sleeps at least ``min_sleep`` (``stubborn``: only jobs that sleep on through the
    lease-lost interrupt)."""
    from django.db import DatabaseError, InterfaceError, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT split_part(worker_id, '/', 1), id::text, fence,"
                " coalesce(extract(epoch FROM started_at), 0)::float8 FROM queue_app_jobs"
                " WHERE status = 'processing' AND coalesce((payload->>'sleep')::float, 0) >= %s"
                " AND (%s OR coalesce((payload->>'stubborn')::bool, false)) ORDER BY started_at",
                [min_sleep, not stubborn],
            )
            return {name: (job_id, fence, claimed) for name, job_id, fence, claimed in cursor.fetchall()}
    except (DatabaseError, InterfaceError):
        connection.close()
        return {}


def reclaimed(job_id: str, fence: int) -> bool:
    """Whether a later claim of the job holds it now (False while PostgreSQL is down)."""
    from django.db import DatabaseError, InterfaceError, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM queue_app_jobs WHERE id = %s AND status = 'processing' AND fence > %s",
                [job_id, fence],
            )
            return cursor.fetchone() is not None
    except (DatabaseError, InterfaceError):
        connection.close()
        return False


def manage_once(env: dict[str, str], *args: str) -> str:
    """Run one command to its end; its stdout. A failure raises with the command's stderr."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def cancel_parked_jobs() -> int:
    """Cancel the far-future and tail jobs (kept queued only for the Redis check), as a client
    would: through the service layer, so the relays must carry the removals to Redis."""
    from django.db.models import Q

    from queue_app.exceptions import TransitionNotAllowed
    from queue_app.models import Job
    from queue_app.services import cancel_job

    parked = Job.objects.filter(Q(payload__far=True) | Q(payload__tail=True), status="queued")
    ids = list(parked.values_list("id", flat=True))
    for job_id in ids:
        try:
            cancel_job(job_id, reason="end of the chaos run")
        except TransitionNotAllowed:
            pass
    return len(ids)


def outbox_counts() -> tuple[int, int]:
    """(undispatched, all) outbox rows."""
    from queue_app.models import OutboxMessage

    return OutboxMessage.objects.filter(dispatched_at__isnull=True).count(), OutboxMessage.objects.count()


def relays_drain(cast: Cast, timeout: float = DRAIN_TIMEOUT_SECONDS) -> tuple[int, int]:
    """Wait (restarting any process that died) for the running relays to drain the outbox;
    returns what ``outbox_counts`` says at the end."""
    try:
        wait_for(
            lambda: (cast.watch(), with_database(undispatched) == 0)[1],
            timeout=timeout,
            what="the outbox to drain",
        )
    except TimeoutError as exc:
        print(exc)
    return with_database(outbox_counts)


def run(args: argparse.Namespace, folder: Path) -> int:
    """The whole run; returns the exit code. Stores and processes are stopped whatever happens."""
    started_run = time.monotonic()
    (folder / "journal").mkdir()
    if args.stores == "dedicated":
        stores = DedicatedStores(folder, args.redis_db)
    else:
        stores = GivenStores(f"chaos_{args.seed}_{os.getpid()}", args.redis_db)
    cast: Cast | None = None
    failed = True
    django_ready = False
    try:
        stores.start()
        env = child_env(args, stores, folder)
        token = setup_django(env)
        django_ready = True
        port = free_port()
        cast = build_cast(args, folder, env, port)
        for child in cast.children:
            cast.start(child)
        wait_for(lambda: health(port), timeout=60, what="the web server")
        print(f"seed {args.seed}: {args.jobs} jobs, {args.duration:.0f} s of faults; {stores.describe()}")

        figures = report.Figures(seed=args.seed, jobs_planned=args.jobs, stores=stores.describe())
        submissions = exercise(args, folder, stores, cast, port, token, figures)
        results = final_checks(args, env, cast, submissions, figures, folder)
        figures.total_seconds = time.monotonic() - started_run
        report.collect(figures)
        text = report.render(figures, results)
        print(text)
        (folder / "report.txt").write_text(text + "\n")
        failed = not all(result.passed for result in results)
        return 1 if failed else 0
    finally:
        if cast is not None:
            cast.stop_all()
        if django_ready:
            from django.db import connections

            connections.close_all()
        stores.close(keep=args.keep or failed)


def exercise(
    args: argparse.Namespace,
    folder: Path,
    stores: DedicatedStores | GivenStores,
    cast: Cast,
    port: int,
    token: str,
    figures: report.Figures,
) -> list[clients.Submission]:
    """Submit while the faults run, then let the system settle; returns the client's record."""
    from queue_app import broker

    window = args.duration * 0.8
    specs = clients.plan_submissions(args.seed, args.jobs, window=window)
    specs += controls.plan_controls(args.seed, args.jobs, window=window)
    specs.sort(key=lambda spec: (spec.at, spec.ref))
    submissions = [clients.Submission(spec) for spec in specs]
    stop_clients = threading.Event()
    started = time.monotonic()
    flows = workflows.WorkflowClient(
        workflows.plan_workflows(args.seed, args.jobs, window=window), started=started, stop=stop_clients
    )
    submissions += flows.submissions.values()
    figures.submissions = submissions
    service = clients.ServiceClient(
        [s for s in submissions if s.spec.channel.startswith("service")], started=started, stop=stop_clients
    )
    api = clients.ApiClient(
        [s for s in submissions if s.spec.channel.startswith("api")],
        port=port,
        token=token,
        seed=args.seed,
        started=started,
        stop=stop_clients,
    )
    service.start()
    api.start()
    flows.start()
    injector = Injector(
        cast=cast,
        stores=stores,
        redis_client=broker.get_client,
        pick_ids=ids_for_stale_pushes,
        busy_workers=busy_worker_names,
        long_jobs=long_jobs_by_worker,
        reclaimed=reclaimed,
        seed=args.seed,
        log_path=folder / "faults.log",
    )
    try:
        injector.run(fault_plan(args), started=started, idle=cast.watch)
    finally:
        injector.close()
    last_fault = injector.last_action_at or time.monotonic()
    print(f"faults done ({sum(injector.applied.values())}); settling")

    # Clients finish first (retrying until acknowledged), then every job must reach an end.
    deadline = last_fault + args.settle_timeout
    for client in (service, api, flows):
        while client.is_alive() and time.monotonic() < deadline:
            cast.watch()
            client.join(timeout=0.2)
    try:
        wait_for(
            lambda: (cast.watch(), with_database(count_unsettled) == 0)[1],
            timeout=max(1.0, deadline - time.monotonic()),
            what="every job to end",
        )
        figures.seconds_to_terminal = time.monotonic() - last_fault
    except TimeoutError as exc:
        print(exc)
        figures.settle_timeout = args.settle_timeout
        figures.unsettled_at_timeout = with_database(count_unsettled)
    stop_clients.set()
    figures.faults_applied, figures.faults_skipped = injector.applied, injector.skipped
    figures.fault_timeline = injector.timeline
    figures.faults_planned = Counter(fault.kind for fault in fault_plan(args))
    figures.api_actions, figures.api_retried_errors = api.actions, api.http_errors
    (folder / "submissions.json").write_text(
        json.dumps([{**vars(s), "spec": vars(s.spec)} for s in submissions], indent=1)
    )
    return submissions


def final_checks(
    args: argparse.Namespace,
    env: dict[str, str],
    cast: Cast,
    submissions: list[clients.Submission],
    figures: report.Figures,
    folder: Path,
) -> list[invariants.Result]:
    """Quiesce, check Redis against PostgreSQL after one reconcile, then every invariant.

    Only the system's own processes move the outbox and Redis here: the relays drain the
    outbox (checked before they stop), the one-shot reconcile repairs Redis.
    """
    settled_outbox = relays_drain(cast)
    cast.watch()
    for role in ("worker", "reconciler", "relay"):
        for child in cast.by_role(role):
            cast.stop(child, timeout=30)
    # From here on no fault is injected, so the relays run without the after-push failpoint:
    # a duplicate in Redis is then a finding, not the at-least-once re-send of a killed relay.
    for child in cast.by_role("relay"):
        child.env = env
        cast.start(child)
    tail = [clients.Submission(spec) for spec in clients.plan_tail(args.seed, TAIL_JOBS)]
    clients.ServiceClient(tail, started=time.monotonic(), stop=threading.Event()).run()
    submissions = [*submissions, *tail]
    relays_drain(cast)
    # Past the grace, so the reconciler judges every job rather than leaving it to the relay.
    time.sleep(RECONCILE_GRACE_SECONDS + 0.5)
    figures.reconcile_summary = manage_once(env, "reconcile_queue").splitlines()[-1]
    redis_result = with_database(lambda: invariants.check_redis_agrees(QUEUES))
    # The far-future and tail jobs were only there to be seen in Redis: cancel them; the
    # relays must carry the removals, and then Redis holds nothing.
    with_database(cancel_parked_jobs)
    final_outbox = relays_drain(cast)
    empty_result = with_database(lambda: invariants.check_redis_empty(QUEUES))
    cast.watch()
    for role in ("relay", "web"):
        for child in cast.by_role(role):
            cast.stop(child, timeout=30)
    figures.failpoint_kills, figures.unexpected_exits = cast.failpoint_kills, cast.unexpected_exits
    figures.pop_failpoint_kills = cast.logged_failpoint_kills("worker", "worker.after_pop")

    invariants.load(submissions, journal.read(folder / "journal"))
    unclean_stops = [(name, code) for name, code in cast.stop_exits if code != 0]
    return [
        *invariants.run_sql_checks(cancel_race_seconds=args.lease / 3 + 1.0),
        invariants.check_log_trails(),
        redis_result,
        empty_result,
        invariants.Result(
            "outbox_drained_by_relays",
            "the system's relays drained the outbox after the faults and after the final"
            " cancels, before they were stopped",
            settled_outbox[0] + final_outbox[0],
            [f"undispatched after the faults: {settled_outbox[0]}, at the end: {final_outbox[0]}"],
            final_outbox[1],
        ),
        faults_applied_per_kind(figures, args),
        invariants.Result(
            "processes_exit_only_when_killed",
            "no relay, worker, reconciler or web process exited by itself (failpoint kills aside)",
            len(cast.unexpected_exits),
            cast.unexpected_exits[:5],
            sum(child.starts for child in cast.children),
        ),
        invariants.Result(
            "processes_stop_cleanly",
            "every process the run stopped (SIGTERM; SIGINT for the web server) exited with 0",
            len(unclean_stops),
            unclean_stops[:5],
            len(cast.stop_exits),
        ),
    ]


def faults_applied_per_kind(figures: report.Figures, args: argparse.Namespace) -> invariants.Result:
    """A run whose faults could not be applied proves little: each planned kind needs
    ``--min-faults-per-kind``, and each armed failpoint must have killed once."""
    minimum = args.min_faults_per_kind
    short = [
        (str(kind), figures.faults_applied[kind], min(minimum, planned))
        for kind, planned in sorted(figures.faults_planned.items())
        if figures.faults_applied[kind] < min(minimum, planned)
    ]
    failpoints = {
        "relay.after_push": (args.failpoint, figures.failpoint_kills),
        "worker.after_pop": (args.pop_failpoint, figures.pop_failpoint_kills),
    }
    short += [(point, kills, 1) for point, (armed, kills) in failpoints.items() if armed > 0 and kills < 1]
    return invariants.Result(
        "faults_applied_per_kind",
        f"at least {minimum} fault(s) of every planned kind were applied, and every armed"
        " failpoint killed at least once (kind, applied, required)",
        len(short),
        short,
        len(figures.faults_planned) + sum(armed > 0 for armed, _ in failpoints.values()),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plan:
        for fault in fault_plan(args):
            print(fault.describe())
        return 0
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # Started in the background by a shell (``cmd &``): SIGINT is ignored, and children
        # would inherit that, so the web server could not be stopped the way it exits 0.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    folder = Path(tempfile.mkdtemp(prefix=f"chaos-{args.seed}-"))
    code = 2
    try:
        code = run(args, folder)
    finally:
        if code == 0 and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"run folder kept: {folder}")
    return code


if __name__ == "__main__":
    sys.exit(main())
