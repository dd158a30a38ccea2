"""Reconcile after a Redis flush: wall time and peak RSS of ``reconcile_queue`` for N queued jobs.

    python reconcile.py <jobs>

Seeds N queued jobs (rows generated inside PostgreSQL) in database
``bench_reconcile``, empties Redis database 10, runs ``manage.py
reconcile_queue`` as a child process, takes its wall time and peak resident
memory (getrusage of that child) and checks that Redis then holds every job
exactly once (that a second pass repairs nothing is the test suite's to
show). Prints the figures as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from common import OURS_TREE, database_url, python, redis_url, uuid7_sql

QUEUES = "default,emails,reports:fifo"

# Queued jobs only: 20% scheduled 10 minutes ahead, the rest due; 3 queues, 3 tiers.
# Each has the outbox row the relay dispatched an hour ago (outside the grace).
SEED_SQL = """
INSERT INTO {jobs} (id, type, queue, payload, priority, priority_value, status, attempts,
                            max_attempts, next_retry_at, enqueued_at, created_at, last_error,
                            last_error_class, last_error_traceback,
                  idempotency_fingerprint, worker_id, backend)
SELECT {id}, 'bench.noop',
       (ARRAY['default', 'default', 'emails', 'reports'])[1 + (g %% 4)],
       jsonb_build_object('n', g),
       (ARRAY['high', 'medium', 'medium', 'low'])[1 + ((g / 4) %% 4)],
       (ARRAY[10, 0, 0, -10])[1 + ((g / 4) %% 4)],
       'queued', 0, 3,
       CASE WHEN g %% 5 = 0 THEN now() + interval '10 minutes' END,
       CASE WHEN g %% 5 = 0 THEN now() + interval '10 minutes'
            ELSE now() - interval '2 hours' + g * interval '1 ms' END,
       now() - interval '2 hours' + g * interval '1 ms', '', '', '', '', '', ''
  FROM generate_series(1, %(n)s) AS g;
INSERT INTO {outbox} (job_id, action, queue, score, created_at, dispatched_at)
SELECT id, 'enqueue', queue, 0, created_at, created_at + interval '5 ms' FROM {jobs};
"""

REDIS_DB = 10


def environment() -> dict[str, str]:
    from ours import environment as ours_environment

    return {
        **ours_environment(),
        "DATABASE_URL": database_url(os.environ.get("BENCH_RECONCILE_DATABASE", "bench_reconcile")),
        "REDIS_URL": redis_url(REDIS_DB),
        "JOBQUEUE_QUEUES": QUEUES,
    }


def seed(n: int) -> float:
    from django.db import connection
    from ours import reset_stores, table

    started = time.perf_counter()
    reset_stores()
    with connection.cursor() as cursor:
        jobs, outbox = table("jobs"), table("job_outbox")  # a --baseline may predate the prefix
        created = "now() - interval '2 hours' + g * interval '1 ms'"
        cursor.execute(SEED_SQL.format(jobs=jobs, outbox=outbox, id=uuid7_sql(created)), {"n": n})
        cursor.execute(f"VACUUM ANALYZE {jobs}")
        cursor.execute(f"VACUUM ANALYZE {outbox}")
    return time.perf_counter() - started


def run_reconciler(env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MiB, summary line) of one ``reconcile_queue`` child."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [python(), str(OURS_TREE / "manage.py"), "reconcile_queue"],
        cwd=OURS_TREE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    output = child.stdout.read().decode().strip()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"reconcile_queue failed: {output}")
    # A long pass prints progress lines before its summary.
    summary = output.splitlines()[-1] if output else ""
    return seconds, usage.ru_maxrss / 1024, summary  # ru_maxrss is in KiB on Linux


def redis_total(client) -> int:
    from queue_app import broker
    from queue_app.conf import queue_settings

    depths = broker.depths(client, list(queue_settings().QUEUES.items()))
    return sum(sum(structures.values()) for structures in depths.values())


def main() -> None:
    n = int(sys.argv[1])
    env = environment()
    from ours import setup_django

    setup_django(env)
    from queue_app import broker

    seed_seconds = seed(n)
    client = broker.get_client()
    client.flushdb()
    seconds, peak, summary = run_reconciler(env)
    restored = redis_total(client)
    if restored != n:
        raise SystemExit(f"Redis holds {restored:,} ids after reconciling, expected {n:,}")
    client.flushdb()
    print(
        json.dumps(
            {
                "reconcile_jobs": n,
                "reconcile_s": seconds,
                "reconcile_rss_mib": peak,
                "seed_s": seed_seconds,
                "summary": summary,
            }
        )
    )


if __name__ == "__main__":
    main()
