"""Every periodic query reads an index range of its own rows, not the tables.

The reconciler, the relay and retention run their queries again and again while the
job table grows; a plan that scans queue_app_jobs, queue_app_job_logs or queue_app_job_outbox
costs more with every finished job. The plans here come from a table of 150,000 jobs (logs and outbox rows
with them) that PostgreSQL has ANALYZEd, not from planner switches such as
enable_seqscan = off, which would hide a missing index behind any index at all.

The rows are written in a transaction that is rolled back, so their deferred foreign
key checks never run; the transactional test's flush then truncates the tables, which
also resets the statistics ANALYZE wrote.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from queue_app.engine import execution, retention, sql
from queue_app.runtime.relay import Relay
from queue_app.states import Status

JOBS = 150_000
DAYS = 30
BIG_TABLES = {"queue_app_jobs", "queue_app_job_logs", "queue_app_job_outbox"}

# A month of history: 2% of the jobs queued (the newest), 20 running with expired leases,
# the rest finished (80% completed, 10% failed, 10% cancelled) one second after their
# creation, spread evenly over the month. One log row and one outbox row per job, all
# relayed but for the newest 100, which a committing process pushed itself (their
# dispatch_after is still ahead: the relay leaves them for now).
SEED = """
INSERT INTO queue_app_jobs (id, type, queue, payload, priority, priority_value, status, attempts, fence,
                            max_attempts, next_retry_at, enqueued_at, created_at, started_at,
                            completed_at, last_error,
                  last_error_class, last_error_traceback, idempotency_fingerprint, worker_id,
                  lease_expires_at, backend)
SELECT lpad(to_hex(g), 32, '0')::uuid, 'probe.run', (ARRAY['default', 'bulk'])[1 + g %% 2], '{}', 'medium', 0,
       s.status, 1, 1, 3, NULL, t.at, t.at,
       CASE WHEN s.status <> 'queued' THEN t.at END,
       CASE WHEN s.status NOT IN ('queued', 'processing') THEN t.at + interval '1 second' END,
       '', '', '', '', CASE WHEN s.status = 'processing' THEN 'w1' ELSE '' END,
       CASE WHEN s.status = 'processing' THEN now() - interval '1 minute' END, ''
  FROM generate_series(1, %(jobs)s) AS g
 CROSS JOIN (SELECT now() - make_interval(days => %(days)s) AS start,
                    make_interval(days => %(days)s) / %(jobs)s AS step,
                    %(jobs)s - %(jobs)s / 50 AS first_queued) AS month
 CROSS JOIN LATERAL (SELECT month.start + g * month.step AS at) AS t
 CROSS JOIN LATERAL (SELECT CASE WHEN g > month.first_queued THEN 'queued'
                                 WHEN g > month.first_queued - 20 THEN 'processing'
                                 WHEN g %% 10 = 0 THEN 'failed'
                                 WHEN g %% 10 = 1 THEN 'cancelled'
                                 ELSE 'completed' END AS status) AS s;
INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
SELECT id, created_at, 'info', 'enqueued', '', '{}' FROM queue_app_jobs;
INSERT INTO queue_app_job_outbox (job_id, action, queue, score, member, created_at, dispatched_at,
                                  dispatch_after, to_head)
SELECT id, 'enqueue', queue, 0, '', created_at,
       CASE WHEN NOT newest THEN created_at + interval '5 ms' END,
       CASE WHEN newest THEN now() + interval '1 hour' END, false
  FROM (SELECT id, queue, created_at, id > lpad(to_hex(%(jobs)s - 100), 32, '0')::uuid AS newest
          FROM queue_app_jobs) AS j;
ANALYZE queue_app_jobs, queue_app_job_logs, queue_app_job_outbox;
"""


def plan(statement: str, params=None) -> dict:
    """The JSON plan PostgreSQL would run ``statement`` with (EXPLAIN, not ANALYZE: nothing runs)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}", params)
        (document,) = cursor.fetchone()
    return (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]


def scans(node: dict) -> list[tuple[str, str, str]]:
    """(node type, table, index) of every scan in a plan, init plans and subplans included."""
    found = []
    if "Relation Name" in node or "Index Name" in node:
        found.append((node["Node Type"], node.get("Relation Name", ""), node.get("Index Name", "")))
    for child in node.get("Plans", []):
        found.extend(scans(child))
    return found


def assert_bounded(statement: str, params=None, *, index: str | None = None) -> None:
    """No sequential scan of a big table; and, when named, ``index`` is scanned."""
    found = scans(plan(statement, params))
    seq = [table for kind, table, _ in found if kind == "Seq Scan" and table in BIG_TABLES]
    assert not seq, f"sequential scan of {seq} in {found} for:\n{statement[:300]}"
    if index is not None:
        index_scans = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}
        assert any(kind in index_scans and name == index for kind, _, name in found), (
            f"{index} not scanned: {found} for:\n{statement[:300]}"
        )


def captured(run) -> list[str]:
    """The statements ``run()`` sent that read or write rows, as PostgreSQL received them
    (parameters bound); savepoints and the like left out."""
    with CaptureQueriesContext(connection) as context:
        run()
    statements = [query["sql"] for query in context.captured_queries]
    return [
        s
        for s in statements
        if s.lstrip().upper().startswith(("SELECT", "WITH", "INSERT", "UPDATE", "DELETE"))
    ]


@pytest.mark.django_db(transaction=True)
def test_each_periodic_query_reads_an_index_range_on_a_big_table(queue_config):
    # Outbox rows relayed more than 29.99 days ago: the first few dozen.
    queue_config(OUTBOX_RETENTION_SECONDS=(DAYS - 0.01) * 86400)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(SEED, {"jobs": JOBS, "days": DAYS})
            cursor.execute("SELECT id::text FROM queue_app_jobs WHERE status = 'queued' ORDER BY id")
            queued = [row[0] for row in cursor.fetchall()]

        # The relay (first: the rescue below writes due rows, which it would send to Redis):
        # its batch of due rows, as it runs (none is due, so it stops before Redis) ...
        (batch,) = [
            statement for statement in captured(Relay().relay_batch) if "queue_app_job_outbox" in statement
        ]
        assert_bounded(batch, index="idx_outbox_undispatched")
        # ... its prune of rows relayed before the retention, as it runs, and the same
        # statement where a week's retention leaves most of the outbox to delete.
        (prune_outbox,) = captured(Relay().prune)
        assert_bounded(prune_outbox, index="idx_outbox_dispatched_at")
        week = {"retention": 7 * 86400, "limit": 5000}
        assert_bounded(sql.query("prune_outbox"), week, index="idx_outbox_dispatched_at")

        # The reconciler: keyset pages of queued jobs (the first, and one from the middle),
        # the look-up of the ids found in Redis, a dry run's page of expired leases, and
        # the rescue of those leases, as it runs (it requeues the 20 jobs).
        for after in (None, queued[len(queued) // 2]):
            page = {"grace": 30, "after": after, "limit": 1000}
            assert_bounded(sql.query("queued_jobs_page"), page, index="idx_jobs_queued_id")
        assert_bounded(sql.query("known_ids"), {"ids": queued[:1000]}, index="queue_app_jobs_pkey")
        assert_bounded(sql.query("expired_leases_page"), {"after": None, "limit": 1000})
        for statement in captured(lambda: execution.rescue_expired_leases(limit=1000)):
            assert_bounded(statement)

        # Retention: a batch of each finished status where a third of the table is past the
        # cutoff (the first prune of a backlog) ...
        cutoff = timezone.now() - timedelta(days=20)
        for status in ("completed", "failed", "cancelled"):
            batch = retention.oldest_batch(retention.finished_jobs(status, cutoff, queues=["default"]), 1000)
            assert_bounded(*batch.query.sql_with_params(), index=f"idx_jobs_{status}_at")
        # The stats (/api/stats/, /metrics, the dashboard): each status counted up to the cap
        # in its own partial index, and the exact counts by queue of the statuses counted
        # small, asked for finished ones too (a status never seen is one of them).
        # (A status most jobs have may be read from the table itself: its first 10,001 rows.)
        capped = {
            index for _, _, index in scans(plan(sql.query("job_status_capped_counts"), {"cap": 10_000}))
        }
        assert {"idx_jobs_live_status", "idx_jobs_failed_at", "idx_jobs_expired_at"} <= capped, capped
        small = {"statuses": ["waiting", "processing", "cancelling", "failed", "expired"]}
        assert_bounded(sql.query("job_counts_by_queue"), small, index="idx_jobs_failed_at")
        assert_bounded(sql.query("job_counts_by_queue"), small, index="idx_jobs_live_status")
        # ... and a real prune of the month's first hours: every statement it sends, the
        # cascade to the log and outbox rows included.
        early = timezone.now() - timedelta(days=DAYS - 0.1)
        statements = captured(
            lambda: retention.prune_finished_jobs(
                finished_before=dict.fromkeys(("completed", "failed", "cancelled"), early), batch_size=1000
            )
        )
        assert any(statement.startswith('DELETE FROM "queue_app_job_logs"') for statement in statements)
        for statement in statements:
            assert_bounded(statement)
        transaction.set_rollback(True)


@pytest.mark.parametrize("name", ["job_status_capped_counts", "job_counts_by_queue"])
def test_each_status_has_its_branch_in_the_stats_counts(name):
    """The counts spell each status in a branch of its own (a partial index's condition is
    proved only by a constant): a status added to the model needs its branch."""
    statement = sql.query(name)
    assert sorted(re.findall(r"WHERE status = '(\w+)'", statement)) == sorted(Status.values)
