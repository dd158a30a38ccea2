"""Seed N queued jobs, empty a Redis database, run the reconciler, print its time and peak memory.

    .venv/bin/python scripts/bench_reconcile.py --jobs 1000000 --redis-db 9

This is the "Redis lost everything" case: every queued job must be restored.
The jobs go into a database of their own (``<DATABASE_URL's name>_reconcile``
or ``--database``), created and migrated when missing; rows are generated
inside PostgreSQL (INSERT ... SELECT generate_series). The Redis database
``--redis-db`` of REDIS_URL's server is EMPTIED (FLUSHDB) first.

``manage.py reconcile_queue`` then runs as a child process; its wall time and
peak resident memory (getrusage maxrss of that child) are printed, then Redis
is checked to hold every job exactly once. A second pass, with Redis already
complete, shows the cost of a routine run that finds nothing to repair.
The reconciler's per-job log lines are rendered as usual and discarded.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from benchdb import ensure_database

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BENCH_QUEUES = "default,emails,reports:fifo"

# Queued jobs only: 20% scheduled 10 minutes ahead, the rest due; 3 queues, 3 tiers.
# Each has the outbox row the relay dispatched an hour ago (outside the grace).
SEED_SQL = """
INSERT INTO jobs (id, type, queue, payload, priority, status, attempts, max_attempts,
                  next_retry_at, enqueued_at, created_at, last_error, idempotency_fingerprint, worker_id)
SELECT gen_random_uuid(), 'bench.noop',
       (ARRAY['default', 'default', 'emails', 'reports'])[1 + (g %% 4)],
       jsonb_build_object('n', g),
       (ARRAY['high', 'medium', 'medium', 'low'])[1 + ((g / 4) %% 4)],
       'queued', 0, 3,
       CASE WHEN g %% 5 = 0 THEN now() + interval '10 minutes' END,
       CASE WHEN g %% 5 = 0 THEN now() + interval '10 minutes'
            ELSE now() - interval '2 hours' + g * interval '1 ms' END,
       now() - interval '2 hours' + g * interval '1 ms', '', '', ''
  FROM generate_series(1, %(n)s) AS g;
INSERT INTO job_outbox (job_id, action, queue, score, created_at, dispatched_at)
SELECT id, 'enqueue', queue, 0, created_at, created_at + interval '5 ms' FROM jobs;
"""


def bench_urls(database: str | None, redis_db: int) -> tuple[str, str, str]:
    from jobsite import embedded

    base = os.environ.get("DATABASE_URL") or embedded.postgres_url()
    parts = urlsplit(base)
    name = database or f"{parts.path.lstrip('/') or 'jobsite'}_reconcile"
    redis_parts = urlsplit(os.environ.get("REDIS_URL") or embedded.redis_url())
    if redis_parts.scheme == "unix":
        query = "&".join(p for p in redis_parts.query.split("&") if p and not p.startswith("db="))
        redis_url = urlunsplit(redis_parts._replace(query=f"{query}&db={redis_db}".lstrip("&")))
    else:
        redis_url = urlunsplit(redis_parts._replace(path=f"/{redis_db}"))
    return urlunsplit(parts._replace(path=f"/{name}")), name, redis_url


def seed(n: int) -> None:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs, job_logs, job_outbox")
        cursor.execute(SEED_SQL, {"n": n})
        for table in ("jobs", "job_outbox"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"seeded {n:,} queued jobs and their outbox rows in {time.perf_counter() - started:.1f} s")


def run_reconciler(env: dict[str, str], batch_size: int | None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MiB, summary line) of one ``reconcile_queue`` child."""
    command = [sys.executable, str(ROOT / "manage.py"), "reconcile_queue"]
    if batch_size:
        command += ["--batch-size", str(batch_size)]
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    summary = child.stdout.read().decode().strip()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"reconcile_queue exited with {child.returncode}: {summary}")
    return seconds, usage.ru_maxrss / 1024, summary  # ru_maxrss is in KiB on Linux


def check_redis(client, n: int) -> str:
    from queue_app import broker
    from queue_app.conf import queue_settings

    depths = broker.depths(client, list(queue_settings().QUEUES.items()))
    total = sum(sum(structures.values()) for structures in depths.values())
    if total != n:
        raise SystemExit(f"Redis holds {total:,} ids, expected {n:,}: {depths}")
    return f"Redis holds all {total:,} ids: {depths}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000, help="queued jobs to seed (default 100000)")
    parser.add_argument("--redis-db", type=int, required=True, help="Redis database number to EMPTY and use")
    parser.add_argument("--database", help="benchmark database name (default: <name>_reconcile)")
    parser.add_argument("--batch-size", type=int, help="reconcile_queue --batch-size")
    args = parser.parse_args()

    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("JOBQUEUE_QUEUES", BENCH_QUEUES)
    os.environ["DJANGO_SETTINGS_MODULE"] = "jobsite.settings"
    url, name, redis_url = bench_urls(args.database, args.redis_db)
    ensure_database(url, name)
    os.environ["DATABASE_URL"] = url
    os.environ["REDIS_URL"] = redis_url

    import django

    django.setup()
    from django.core.management import call_command

    from queue_app import broker

    call_command("migrate", verbosity=0)
    seed(args.jobs)
    client = broker.get_client()
    client.flushdb()
    env = {**os.environ, "LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}

    print(f"\nreconcile {args.jobs:,} queued jobs into an empty Redis ({redis_url})")
    seconds, peak, summary = run_reconciler(env, args.batch_size)
    print(f"  {summary}")
    print(f"  wall {seconds:.1f} s, {args.jobs / seconds:,.0f} jobs/s, peak RSS {peak:.0f} MiB")
    print(f"  {check_redis(client, args.jobs)}")

    print("\nsecond pass, nothing to repair")
    seconds, peak, summary = run_reconciler(env, args.batch_size)
    print(f"  {summary}")
    print(f"  wall {seconds:.1f} s, peak RSS {peak:.0f} MiB")
    print(f"  {check_redis(client, args.jobs)}")


if __name__ == "__main__":
    main()
