"""Prune a strict-FIFO list after a mass cancel: the Redis work of one reconciler pass.

    python reconcile_fifo_prune.py <ids> [<percent cancelled, default 10>]

Seeds <ids> queued jobs of the strict-FIFO queue ``bulk`` (rows generated inside
PostgreSQL, each with the outbox row the relay dispatched an hour ago) in database
``bench_reconcile_fifo``, cancels the given share of them (spread evenly), and
puts every id in the queue's Redis list (database 12), in enqueue order. Then it
times one LREM of that list (what the reconciler used to send once per cancelled
id), runs one reconciler pass in this process, and reports its wall time, the
Redis commands it made by name (INFO commandstats before and after), and the
longest command the server's slow log recorded meanwhile. Checks that the list
then holds exactly the queued ids, in enqueue order. JSON on the last line.

Not part of run.py: a figure for the reconciler's design, not for the comparison.
"""

from __future__ import annotations

import json
import sys
import time

from common import database_url, redis_url

QUEUE = "bulk"
REDIS_DB = 12
PUSH_CHUNK = 10_000

# Job g is cancelled when g mod 100 < the percentage; ids sort by g, as enqueue order.
SEED_SQL = """
INSERT INTO queue_app_jobs (id, type, queue, payload, priority, priority_value, status, attempts,
                            max_attempts, enqueued_at, created_at, completed_at, last_error,
                            last_error_class, last_error_traceback,
                  idempotency_fingerprint, worker_id, backend)
SELECT lpad(to_hex(g), 32, '0')::uuid, 'bench.noop', 'bulk', '{}', 'medium', 0,
       CASE WHEN g %% 100 < %(percent)s THEN 'cancelled' ELSE 'queued' END, 0, 3,
       now() - interval '2 hours' + g * interval '1 ms', now() - interval '2 hours' + g * interval '1 ms',
       CASE WHEN g %% 100 < %(percent)s THEN now() - interval '1 hour' END, '', '', '', '', '', ''
  FROM generate_series(1, %(n)s) AS g;
INSERT INTO queue_app_job_outbox (job_id, action, queue, score, created_at, dispatched_at)
SELECT id, 'enqueue', queue, 0, created_at, now() - interval '1 hour' FROM queue_app_jobs;
"""


def environment() -> dict[str, str]:
    from ours import environment as ours_environment

    return {
        **ours_environment(),
        "DATABASE_URL": database_url("bench_reconcile_fifo"),
        "REDIS_URL": redis_url(REDIS_DB),
        "JOBQUEUE_QUEUES": f"{QUEUE}:fifo",
    }


def seed(n: int, percent: int) -> tuple[float, list[str]]:
    """Rows in PostgreSQL, every id in the Redis list; (seconds, the queued ids in order)."""
    from django.db import connection

    from queue_app import broker

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE queue_app_jobs, queue_app_job_logs, queue_app_job_outbox, queue_app_job_schedules,"
            " queue_app_job_dependencies, queue_app_job_waits, queue_app_job_workflow_steps,"
            " queue_app_job_workflows, queue_app_job_batch_members, queue_app_job_batches"
        )
        cursor.execute(SEED_SQL, {"n": n, "percent": percent})
        cursor.execute("VACUUM ANALYZE queue_app_jobs")
        cursor.execute("VACUUM ANALYZE queue_app_job_outbox")
        cursor.execute("SELECT id::text, status FROM queue_app_jobs ORDER BY id")
        rows = cursor.fetchall()
    client = broker.get_client()
    client.flushdb()
    key = broker.fifo_key(QUEUE)
    for start in range(0, len(rows), PUSH_CHUNK):
        client.rpush(key, *(job_id for job_id, _ in rows[start : start + PUSH_CHUNK]))
    return time.perf_counter() - started, [job_id for job_id, status in rows if status == "queued"]


def command_calls(client) -> dict[str, tuple[int, int]]:
    """Command name -> (calls, microseconds) so far, on the whole server."""
    return {
        name.removeprefix("cmdstat_"): (stats["calls"], stats["usec"])
        for name, stats in client.info("commandstats").items()
    }


def main() -> None:
    n = int(sys.argv[1])
    percent = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    from ours import setup_django

    setup_django(environment())
    from queue_app import broker
    from queue_app.runtime.reconciler import Reconciler

    seed_seconds, queued = seed(n, percent)
    client = broker.get_client()
    key = broker.fifo_key(QUEUE)

    # What one LREM costs on this list: it walks all of it (a value no list holds).
    started = time.perf_counter()
    for _ in range(3):
        client.lrem(key, 0, "no-such-id")
    lrem_ms = (time.perf_counter() - started) / 3 * 1000

    slow_before = {entry["id"] for entry in client.slowlog_get(128)}
    before = command_calls(client)
    started = time.perf_counter()
    report = Reconciler().run_once()
    seconds = time.perf_counter() - started
    after = command_calls(client)
    slow = [entry for entry in client.slowlog_get(128) if entry["id"] not in slow_before]

    final = client.lrange(key, 0, -1)
    if final != queued:
        raise SystemExit(f"the list holds {len(final):,} ids, not the {len(queued):,} queued ids in order")
    commands = {
        name: {"calls": calls - before.get(name, (0, 0))[0], "usec": usec - before.get(name, (0, 0))[1]}
        for name, (calls, usec) in sorted(after.items())
        if calls != before.get(name, (0, 0))[0] and not name.startswith(("info", "slowlog"))
    }
    cancelled = n - len(queued)
    print(
        json.dumps(
            {
                "fifo_ids": n,
                "cancelled": cancelled,
                "removed_stale": report.counts["removed_stale"],
                "reconcile_s": round(seconds, 2),
                "redis_commands": sum(entry["calls"] for entry in commands.values()),
                "redis_busy_ms": round(sum(entry["usec"] for entry in commands.values()) / 1000, 1),
                "commands": commands,
                "slowest_command_ms": max((entry["duration"] / 1000 for entry in slow), default=None),
                "slow_commands": [(str(entry["command"])[:80], entry["duration"] / 1000) for entry in slow],
                "one_lrem_ms": round(lrem_ms, 2),
                "old_prune_projected_s": round(lrem_ms * cancelled / 1000),
                "seed_s": round(seed_seconds, 1),
                "summary": report.summary(),
            }
        )
    )
    client.flushdb()


if __name__ == "__main__":
    main()
