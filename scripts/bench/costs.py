"""What one job costs each part of the system: the figures the capacity model is built on.

    ./dev bench --costs 5000          (or: python costs.py <jobs> [database], from scripts/bench)

In database ``bench_costs`` and Redis database 14 (both emptied), three phases over N
no-op jobs, each measured as the difference of counters taken before and after it (the
history benchmark measures them in its own databases too, where a reset deletes only
the day's jobs and the history stays):

- enqueue: N ``enqueue_job`` calls from this process (each pushes its job on commit);
- relay: ``runrelay`` checking the N outbox rows once their grace has passed;
- drain: ``runworker`` (one process) running the N jobs.

Per job, for each phase: PostgreSQL transactions committed in the database, the pages its
statements read (from shared buffers or not: what a deeper index costs) and WAL bytes
written (pg_stat_database, pg_current_wal_lsn), Redis commands processed and Redis CPU
(INFO), the CPU of the PostgreSQL server's processes (/proc), and the CPU of the process
doing the work (this one for the enqueue, the relay's and the worker's process trees).
Server-wide counters take in whatever else the machine runs: measure on a quiet one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from common import BENCH_DIR, ROOT, python, spawn, stop_all, wait_until

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# A backend reports its statistics at most once a second while busy, and at exit.
STATS_FLUSH_SECONDS = 1.2


def stop_gracefully(process) -> dict[str, float]:
    """The CPU of a phase's process and of PostgreSQL (whose backends of the process end with
    it), read before it stops; then SIGTERM and wait, so those database sessions report
    their statistics as they close."""
    cpu = {"process_cpu_ms": cpu_ms([process.pid]), "postgres_cpu_ms": cpu_ms(postgres_pids())}
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        stop_all([process])
    return cpu


def environment(database: str = "bench_costs") -> dict[str, str]:
    from ours import environment as ours_environment

    own = {"BENCH_OURS_DATABASE": database, "BENCH_OURS_REDIS_DB": "14"}
    os.environ.update(own)
    return {**ours_environment(), **own}


def cpu_ms(pids: list[int]) -> float:
    """User + system CPU of these processes and every process under them, in ms."""
    total, pending = 0, list(pids)
    while pending:
        pid = pending.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        pending.extend(int(child) for child in children)
    return total * 1000 / CLOCK_TICKS


def postgres_pids() -> list[int]:
    """Every process of the PostgreSQL servers on this machine (their CPU is the server's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


class Counters:
    """Server-wide counters, read at the start and the end of a phase."""

    def __init__(self, cursor, client, worker_pids) -> None:
        self.cursor, self.client, self.worker_pids = cursor, client, worker_pids

    def read(self, cpu: dict[str, float] | None = None) -> dict[str, float]:
        """The counters now; ``cpu`` the CPU figures when they were read before the phase's
        process stopped. Backends report their statistics when idle or at exit: waited for."""
        if cpu is None:
            cpu = {"process_cpu_ms": cpu_ms(self.worker_pids()), "postgres_cpu_ms": cpu_ms(postgres_pids())}
        time.sleep(STATS_FLUSH_SECONDS)
        self.cursor.execute("SELECT pg_stat_force_next_flush()")  # this connection's own
        self.cursor.execute("SELECT pg_stat_clear_snapshot()")
        self.cursor.execute(
            "SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn, blks_hit + blks_read"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
        commits, wal, pages = self.cursor.fetchone()
        stats, redis_cpu = self.client.info("stats"), self.client.info("cpu")
        return {
            "pg_commits": float(commits),
            "wal_bytes": float(wal),
            "pg_pages": float(pages),
            "redis_commands": float(stats["total_commands_processed"]),
            "redis_cpu_ms": (redis_cpu["used_cpu_user"] + redis_cpu["used_cpu_sys"]) * 1000,
            **cpu,
        }


def per_job(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    return {key: (after[key] - before[key]) / n for key in before}


def measure(n: int, database: str = "bench_costs") -> dict:
    env = environment(database)
    from ours import TODAY, reset_stores, setup_django

    setup_django(env)
    from django.db import connection

    from queue_app import broker
    from queue_app.services import enqueue_job, pause_queue, resume_queue

    reset_stores()
    client = broker.get_client()
    costs: dict[str, dict[str, float]] = {}
    manage = [python(), str(ROOT / "manage.py")]
    with connection.cursor() as cursor:
        counters = Counters(cursor, client, lambda: [os.getpid()])
        before = counters.read()
        for arg in range(n):
            enqueue_job("bench.noop", {"n": arg})
        costs["enqueue"] = per_job(before, counters.read(), n)

        cursor.execute("SELECT extract(epoch FROM max(dispatch_after) - now()) FROM queue_app_job_outbox")
        time.sleep(max(0.0, float(cursor.fetchone()[0] or 0)))  # the rows' grace: the relay's turn
        # The relay starts against a locked outbox and its first claim waits there: its start-up
        # is not the rows' cost, and it relays nothing while the counters before are read.
        gate = psycopg.connect(env["DATABASE_URL"])
        gate.execute("LOCK TABLE queue_app_job_outbox IN EXCLUSIVE MODE")
        log = Path(os.environ["BENCH_LOG_DIR"]) / "costs-relay.log"
        log.unlink(missing_ok=True)
        relay = spawn([*manage, "runrelay"], env, "costs-relay")
        counters.worker_pids = lambda: [relay.pid]
        try:
            wait_until(
                lambda: log.exists() and "relay_started" in log.read_text(), timeout=120, what="a relay"
            )
            time.sleep(1)  # its first claim is sent and waits on the lock
            before = counters.read()
            gate.close()

            def relayed() -> bool:
                cursor.execute("SELECT count(*) FROM queue_app_job_outbox WHERE dispatched_at IS NULL")
                return cursor.fetchone()[0] == 0

            wait_until(relayed, timeout=600, what="the outbox relayed")
            costs["relay"] = per_job(before, counters.read(stop_gracefully(relay)), n)
        finally:
            gate.close()
            stop_all([relay])

        # Started on a paused queue and idle first: its start-up is not the jobs' cost.
        pause_queue("default")
        log = Path(os.environ["BENCH_LOG_DIR"]) / "costs-worker.log"
        log.unlink(missing_ok=True)
        worker = spawn([*manage, "runworker"], env, "costs-worker")
        counters.worker_pids = lambda: [worker.pid]
        try:
            wait_until(
                lambda: log.exists() and "worker_started" in log.read_text(), timeout=120, what="a worker"
            )
            time.sleep(2)
            before = counters.read()
            resume_queue("default")

            def drained() -> bool:
                # A look-up in the live statuses' indexes, polled seldom: a count over the
                # finished jobs would add its own pages and CPU to the phase it measures.
                cursor.execute(
                    "SELECT NOT EXISTS (SELECT FROM queue_app_jobs WHERE status IN ('queued', 'processing'))"
                )
                return cursor.fetchone()[0]

            wait_until(drained, timeout=max(600.0, n / 50), what=f"{n:,} jobs done", every=0.2)
            costs["drain"] = per_job(before, counters.read(stop_gracefully(worker)), n)
            cursor.execute(f"SELECT count(*) FROM queue_app_jobs WHERE status = 'completed' AND {TODAY}")
            if cursor.fetchone()[0] < n:
                raise RuntimeError(f"the drain ended with fewer than {n:,} jobs completed")
        finally:
            stop_all([worker])
    return {"jobs": n, "costs": costs}


LABELS = {
    "pg_commits": "PostgreSQL transactions",
    "wal_bytes": "WAL bytes",
    "pg_pages": "PostgreSQL pages read (cache or disk)",
    "postgres_cpu_ms": "PostgreSQL CPU (ms)",
    "redis_commands": "Redis commands",
    "redis_cpu_ms": "Redis CPU (ms)",
    "process_cpu_ms": "the phase's own process CPU (ms)",
}


def run(n: int, run_child, out_dir: Path, env: dict) -> int:
    print(f"  costs per job over {n:,} jobs ...", file=sys.stderr, flush=True)
    result = run_child("costs.py", str(n), env=env)
    if "error" in result:
        print(f"FAILED costs: {result['error']}")
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "costs.json").write_text(json.dumps(result, indent=2))
    phases = list(result["costs"])
    print(f"cost per job, {n:,} no-op jobs\n")
    print(f"{'':<36}" + "".join(f"{phase:>12}" for phase in phases))
    for key, label in LABELS.items():
        print(f"{label:<36}" + "".join(f"{result['costs'][phase][key]:>12.3f}" for phase in phases))
    print(f"\nJSON: {out_dir / 'costs.json'}")
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(BENCH_DIR), str(ROOT)]
    print(json.dumps(measure(int(sys.argv[1]), *sys.argv[2:3])))
