"""The periodic queries' plans on a big table: EXPLAIN (ANALYZE, BUFFERS) of each, once.

    python query_plans.py [<jobs, default 5,000,000>]

Seeds <jobs> jobs in database ``bench_query_plans`` (rows generated inside
PostgreSQL, shaped as tests/test_periodic_query_plans.py shapes its 150,000: a
month of history, 2% queued, 20 running with expired leases, the rest finished;
one log row and one outbox row per job, all relayed but the newest 100), ANALYZEs
them, then runs each periodic query of the reconciler, the relay and retention
under EXPLAIN (ANALYZE, BUFFERS) in a transaction that is rolled back, and prints
each plan. A query that reads an index range of its own rows touches a few hundred
buffers however big the tables are. JSON on the last line: per query, the scans
(node, table, index), the rows it returned, the buffers it touched and its time.

The rows stay in the database for another run (seeding is the slow part): pass
--reseed to write them again.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from datetime import timedelta

from common import database_url, redis_url

DAYS = 30
SEED_CHUNK = 1_000_000

SEED_JOBS = """
INSERT INTO queue_app_jobs (id, type, queue, payload, priority, priority_value, status, attempts, fence,
                            max_attempts, next_retry_at, enqueued_at, created_at, started_at,
                            completed_at, last_error,
                  last_error_class, last_error_traceback, idempotency_fingerprint, worker_id,
                  lease_expires_at, backend)
SELECT lpad(to_hex(g), 32, '0')::uuid, 'bench.noop', (ARRAY['default', 'bulk'])[1 + g %% 2], '{}',
       'medium', 0, s.status, 1, 1, 3, NULL, t.at, t.at,
       CASE WHEN s.status <> 'queued' THEN t.at END,
       CASE WHEN s.status NOT IN ('queued', 'processing') THEN t.at + interval '1 second' END,
       '', '', '', '', CASE WHEN s.status = 'processing' THEN 'w1' ELSE '' END,
       CASE WHEN s.status = 'processing' THEN now() - interval '1 minute' END, ''
  FROM generate_series(%(first)s, %(last)s) AS g
 CROSS JOIN (SELECT now() - make_interval(days => %(days)s) AS start,
                    make_interval(days => %(days)s) / %(jobs)s AS step,
                    %(jobs)s - %(jobs)s / 50 AS first_queued) AS month
 CROSS JOIN LATERAL (SELECT month.start + g * month.step AS at) AS t
 CROSS JOIN LATERAL (SELECT CASE WHEN g > month.first_queued THEN 'queued'
                                 WHEN g > month.first_queued - 20 THEN 'processing'
                                 WHEN g %% 10 = 0 THEN 'failed'
                                 WHEN g %% 10 = 1 THEN 'cancelled'
                                 ELSE 'completed' END AS status) AS s
"""
SEED_LOGS_AND_OUTBOX = """
INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
SELECT id, created_at, 'info', 'enqueued', '', '{}' FROM queue_app_jobs
 WHERE id BETWEEN lpad(to_hex(%(first)s), 32, '0')::uuid AND lpad(to_hex(%(last)s), 32, '0')::uuid;
INSERT INTO queue_app_job_outbox (job_id, action, queue, score, member, created_at, dispatched_at,
                                  dispatch_after, to_head)
SELECT id, 'enqueue', queue, 0, '', created_at,
       CASE WHEN NOT newest THEN created_at + interval '5 ms' END,
       CASE WHEN newest THEN now() + interval '1 hour' END, false
  FROM (SELECT id, queue, created_at, id > lpad(to_hex(%(jobs)s - 100), 32, '0')::uuid AS newest
          FROM queue_app_jobs
         WHERE id BETWEEN lpad(to_hex(%(first)s), 32, '0')::uuid
                      AND lpad(to_hex(%(last)s), 32, '0')::uuid) AS j
"""


def environment() -> dict[str, str]:
    from ours import environment as ours_environment

    return {
        **ours_environment(),
        "DATABASE_URL": database_url("bench_query_plans"),
        "REDIS_URL": redis_url(12),  # not written: the relay's batch finds nothing due
        "JOBQUEUE_QUEUES": "default,bulk:fifo",
    }


def seed(jobs: int) -> float:
    from django.db import DatabaseError

    started = time.perf_counter()
    with connection().cursor() as cursor:
        cursor.execute(
            "TRUNCATE queue_app_jobs, queue_app_job_logs, queue_app_job_outbox, queue_app_job_schedules,"
            " queue_app_job_dependencies, queue_app_job_waits, queue_app_job_workflow_steps,"
            " queue_app_job_workflows, queue_app_job_batch_members, queue_app_job_batches"
        )
        with contextlib.suppress(DatabaseError):
            # Seeding only (a superuser may): no deferred foreign-key check for each of 10M rows.
            cursor.execute("SET session_replication_role = replica")
        for first in range(1, jobs + 1, SEED_CHUNK):
            bounds = {"first": first, "last": min(first + SEED_CHUNK - 1, jobs), "jobs": jobs, "days": DAYS}
            cursor.execute(SEED_JOBS, bounds)
            cursor.execute(SEED_LOGS_AND_OUTBOX, bounds)
            print(f"  seeded {bounds['last']:,} jobs", file=sys.stderr, flush=True)
        cursor.execute("SET session_replication_role = DEFAULT")
        for table in ("queue_app_jobs", "queue_app_job_logs", "queue_app_job_outbox"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    return time.perf_counter() - started


def explained(statement: str, params=None) -> dict:
    """Runs ``statement`` under EXPLAIN (ANALYZE, BUFFERS), its writes undone; prints the plan,
    returns its figures."""
    with undone(), connection().cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params)
        (document,) = cursor.fetchone()
    with undone(), connection().cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", params)
        print("\n".join(row[0] for row in cursor.fetchall()), flush=True)
    root = (json.loads(document) if isinstance(document, str) else document)[0]
    scans = []

    def walk(node: dict) -> None:
        if "Relation Name" in node or "Index Name" in node:
            scans.append([node["Node Type"], node.get("Relation Name", ""), node.get("Index Name", "")])
        for child in node.get("Plans", []):
            walk(child)

    walk(root["Plan"])
    plan = root["Plan"]
    return {
        "scans": scans,
        "rows": plan.get("Actual Rows"),
        "buffers": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
        "ms": round(root["Execution Time"], 2),
    }


def connection():
    from django.db import connection

    return connection


@contextlib.contextmanager
def undone():
    """A savepoint rolled back at the end: what runs inside changes nothing."""
    from django.db import transaction

    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def captured(run) -> list[str]:
    """The statements ``run()`` sends that read or write rows (its writes undone)."""
    from django.test.utils import CaptureQueriesContext

    with undone(), CaptureQueriesContext(connection()) as context:
        run()
    statements = [query["sql"] for query in context.captured_queries]
    return [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH", "UPDATE", "DELETE"))]


def main() -> None:
    jobs = int(next((arg for arg in sys.argv[1:] if arg.isdigit()), 5_000_000))
    from ours import setup_django

    setup_django(environment())
    from django.db import transaction
    from django.utils import timezone

    from queue_app.engine import execution, retention, sql
    from queue_app.runtime.relay import Relay

    with connection().cursor() as cursor:
        cursor.execute("SELECT count(*) FROM queue_app_jobs")
        (present,) = cursor.fetchone()
    seed_seconds = seed(jobs) if present != jobs or "--reseed" in sys.argv else 0.0
    results: dict[str, dict] = {}

    def record(name: str, statement: str, params=None) -> None:
        print(f"\n-- {name}", flush=True)
        results[name] = explained(statement, params)

    with transaction.atomic():
        with connection().cursor() as cursor:
            cursor.execute("SELECT id::text FROM queue_app_jobs WHERE status = 'queued' ORDER BY id")
            queued = [row[0] for row in cursor.fetchall()]
        page = {"grace": 30, "limit": 5000}
        record("reconcile: queued_jobs_page, first", sql.query("queued_jobs_page"), {**page, "after": None})
        middle = {**page, "after": queued[len(queued) // 2]}
        record("reconcile: queued_jobs_page, middle", sql.query("queued_jobs_page"), middle)
        record("reconcile: known_ids (5,000 ids)", sql.query("known_ids"), {"ids": queued[:5000]})
        record(
            "reconcile: expired_leases_page", sql.query("expired_leases_page"), {"after": None, "limit": 5000}
        )
        (batch,) = [
            statement for statement in captured(Relay().relay_batch) if "queue_app_job_outbox" in statement
        ]
        record("relay: due rows", batch)
        week = {"retention": 7 * 86400, "limit": 5000}
        record("relay: prune_outbox (7 days)", sql.query("prune_outbox"), week)
        cutoff = timezone.now() - timedelta(days=20)
        for status in ("completed", "failed", "cancelled"):
            candidates = retention.oldest_batch(retention.finished_jobs(status, cutoff), 1000)
            record(f"retention: oldest {status} batch (20 days)", *candidates.query.sql_with_params())
        # One batch: the first 800 jobs of the month (some 640 of them completed).
        early = timezone.now() - timedelta(days=DAYS) * (1 - 800 / jobs)
        statements = captured(
            lambda: retention.prune_finished_jobs(finished_before={"completed": early}, batch_size=1000)
        )
        for number, statement in enumerate(statements, 1):
            record(f"retention: prune statement {number} ({statement[:40]}...)", statement)
        rescue = captured(lambda: execution.rescue_expired_leases(limit=1000))
        record("reconcile: rescue_expired_leases", rescue[0])
        transaction.set_rollback(True)

    print(json.dumps({"jobs": jobs, "seed_s": round(seed_seconds, 1), "queries": results}))


if __name__ == "__main__":
    main()
