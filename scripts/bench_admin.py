"""Seed N jobs into a database of their own, then time the admin pages and /api/stats/ and print medians.

    .venv/bin/python scripts/bench_admin.py --jobs 1000000

The database is ``<DATABASE_URL's name>_bench`` (or ``--database``), created
and migrated when missing and re-seeded only when its job count differs from
``--jobs`` (or with ``--reseed``). Rows are generated inside PostgreSQL
(INSERT ... SELECT generate_series): a million jobs with two million log rows
take about a minute. Pages are rendered by a logged-in Django test client,
in process, against that database; Redis is only read (the depths and the
ids first in line), from the Redis of REDIS_URL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

from bench.common import uuid7_sql
from benchdb import ensure_database

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Three queues, so the queue filter and the dashboard have something to show.
BENCH_QUEUES = "default,emails,reports:fifo"

# Shares of the job table, in percent: what a busy, healthy system looks like.
SEED_SQL = """
INSERT INTO queue_app_jobs (id, type, queue, payload, priority, priority_value, status, attempts,
                            max_attempts, next_retry_at, enqueued_at, created_at, started_at, completed_at,
                  last_error, last_error_class, last_error_traceback, result, idempotency_key,
                  idempotency_fingerprint, owner_id, worker_id, lease_expires_at, backend)
SELECT {id},
       (%(types)s::text[])[1 + (g %% array_length(%(types)s::text[], 1))],
       (%(queues)s::text[])[1 + ((g / 7) %% array_length(%(queues)s::text[], 1))],
       jsonb_build_object('n', g),
       (ARRAY['high', 'medium', 'medium', 'low'])[1 + (g %% 4)],
       (ARRAY[10, 0, 0, -10])[1 + (g %% 4)],
       status,
       CASE WHEN status IN ('queued') THEN 0 WHEN status = 'failed' THEN 3 ELSE 1 END,
       3,
       CASE WHEN status = 'queued' AND g %% 5 = 0 THEN now() + interval '10 minutes' END,
       created,
       created,
       CASE WHEN status IN ('completed', 'failed', 'processing') THEN created + interval '1 second' END,
       CASE WHEN status IN ('completed', 'failed') THEN created + interval '1 second' + (r * interval '3 s')
            WHEN status = 'cancelled' THEN created + interval '2 seconds' END,
       CASE WHEN status = 'failed' THEN 'RuntimeError: upstream timed out after 30s (request ' || g || ')'
            ELSE '' END,
       CASE WHEN status = 'failed' THEN 'builtins.RuntimeError' ELSE '' END,
       CASE WHEN status = 'failed' THEN 'Traceback (most recent call last):' || chr(10)
                                        || 'RuntimeError: upstream timed out after 30s' ELSE '' END,
       CASE WHEN status = 'completed' THEN jsonb_build_object('ok', true) END,
       CASE WHEN g %% 10 = 0 THEN 'order-' || g END,
       '',
       NULL,
       CASE WHEN status = 'processing' THEN 'bench-worker' ELSE '' END,
       CASE WHEN status = 'processing' THEN now() + interval '1 minute' END,
       ''
  FROM (
        SELECT g, r,
               -- Rows arrive in time order over 30 days, as in a live table.
               now() - interval '30 days' + (g::float8 / %(n)s) * interval '30 days' AS created,
               CASE WHEN r < 0.80 THEN 'completed' WHEN r < 0.85 THEN 'failed'
                    WHEN r < 0.88 THEN 'cancelled' WHEN r < 0.98 THEN 'queued'
                    ELSE 'processing' END AS status
          FROM (SELECT g, random() AS r FROM generate_series(1, %(n)s) AS g) AS numbered
       ) AS seeded
""".replace("{id}", uuid7_sql("created"))  # ids as the queue makes them, in time order

# Every job gets its 'enqueued' row, finished ones a closing row too.
SEED_LOGS_SQL = """
INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
SELECT id, created_at, 'info', 'enqueued', 'enqueued on ' || queue || ' (' || priority || ')', '{}'
  FROM queue_app_jobs ORDER BY created_at;
INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
SELECT id, completed_at,
       CASE WHEN status = 'failed' THEN 'error' ELSE 'info' END,
       status, last_error, jsonb_build_object('attempt', attempts)
  FROM queue_app_jobs WHERE status IN ('completed', 'failed', 'cancelled') ORDER BY completed_at;
"""

# The outbox keeps a week of dispatched rows and a small pending backlog.
SEED_OUTBOX_SQL = """
INSERT INTO queue_app_job_outbox (job_id, action, queue, score, created_at, dispatched_at)
SELECT id, 'enqueue', queue, 0, created_at,
       CASE WHEN status = 'queued' AND created_at > now() - interval '2 minutes' THEN NULL
            ELSE created_at + interval '5 ms' END
  FROM queue_app_jobs WHERE created_at > now() - interval '7 days' ORDER BY created_at;
"""


def bench_database_url(base_url: str, name: str | None) -> tuple[str, str]:
    """(URL of the benchmark database, its name) on the same server as ``base_url``."""
    parts = urlsplit(base_url)
    base_name = parts.path.lstrip("/") or "jobsite"
    name = name or f"{base_name}_bench"
    return urlunsplit(parts._replace(path=f"/{name}")), name


def seed(n: int) -> None:
    from django.db import connection

    from queue_app.conf import queue_settings
    from queue_app.handlers import registered_types

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE queue_app_jobs, queue_app_job_logs, queue_app_job_outbox, queue_app_job_schedules,"
            " queue_app_job_dependencies, queue_app_job_waits, queue_app_job_workflow_steps,"
            " queue_app_job_workflows, queue_app_job_batch_members, queue_app_job_batches"
        )
        cursor.execute(
            SEED_SQL, {"n": n, "types": registered_types(), "queues": list(queue_settings().QUEUES)}
        )
        cursor.execute(SEED_LOGS_SQL)
        cursor.execute(SEED_OUTBOX_SQL)
    print(f"seeded {n:,} jobs with their logs and outbox rows in {time.perf_counter() - started:.1f} s")


def vacuum_analyze() -> None:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        for table in ("queue_app_jobs", "queue_app_job_logs", "queue_app_job_outbox"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"vacuum analyze in {time.perf_counter() - started:.1f} s")


def job_count() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM queue_app_jobs")
        return cursor.fetchone()[0]


def pages() -> list[tuple[str, str]]:
    """(label, URL) of every page to time, with ids and values taken from the data."""
    from django.urls import reverse

    from queue_app.models import Job

    changelist = reverse("admin:queue_app_job_changelist")
    failed = Job.objects.filter(status="failed").order_by().values_list("id", flat=True).first()
    sample = Job.objects.order_by().values_list("id", "idempotency_key", "created_at").last()
    keyed = (
        Job.objects.filter(idempotency_key__isnull=False)
        .order_by()
        .values_list("idempotency_key", flat=True)[:1][0]
    )

    def q(**params) -> str:
        return f"{changelist}?{urlencode(params)}"

    created = sample[2]
    return [
        ("job list, no filter", changelist),
        ("job list, status=failed", q(status__exact="failed")),
        ("job list, status=queued", q(status__exact="queued")),
        ("job list, status=completed, page 50", q(status__exact="completed", p=50)),
        ("job list, search full id", q(q=str(failed))),
        ("job list, status=failed + search full id", q(status__exact="failed", q=str(failed))),
        ("job list, search short id (8 hex)", q(q=str(failed)[:8])),
        ("job list, search idempotency key", q(q=keyed)),
        ("job list, search error text", q(q="upstream timed out")),
        ("job list, type=demo.fail", q(type="demo.fail")),
        ("job list, queue=emails + status=queued", q(queue="emails", status__exact="queued")),
        ("job list, priority=high", q(priority__exact="high")),
        (
            "job list, date hierarchy (one day)",
            q(created_at__year=created.year, created_at__month=created.month, created_at__day=created.day),
        ),
        ("job detail with log trail", reverse("admin:queue_app_job_change", args=[failed])),
        ("log list, level=error", f"{reverse('admin:queue_app_joblog_changelist')}?level__exact=error"),
        ("outbox list, pending", f"{reverse('admin:queue_app_outboxmessage_changelist')}?state=pending"),
        ("dashboard", reverse("admin:queue_app_job_dashboard")),
        ("api stats", reverse("stats")),
    ]


OWNED_JOBS = 10


def ensure_owner() -> None:
    """A user without permissions who owns OWNED_JOBS jobs spread over the whole table (the
    oldest among them a month old): the API's list of their own jobs is timed for them."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    owner, _ = get_user_model().objects.get_or_create(username="bench-owner")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM queue_app_jobs WHERE owner_id = %s", [owner.pk])
        if cursor.fetchone()[0] == OWNED_JOBS:
            return
        cursor.execute("UPDATE queue_app_jobs SET owner_id = NULL WHERE owner_id IS NOT NULL")
        cursor.execute(
            """
            UPDATE queue_app_jobs SET owner_id = %(owner)s
             WHERE id IN (SELECT id
                            FROM (SELECT id, row_number() OVER (ORDER BY created_at) - 1 AS position
                                    FROM queue_app_jobs) AS numbered
                           WHERE position %%
                                 greatest((SELECT count(*) FROM queue_app_jobs) / %(owned)s, 1) = 0
                           LIMIT %(owned)s)
            """,
            {"owner": owner.pk, "owned": OWNED_JOBS},
        )
        cursor.execute("ANALYZE queue_app_jobs")


def time_pages(repeat: int, verbose: bool = False) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    owner_client = Client(SERVER_NAME="localhost")
    owner_client.force_login(get_user_model().objects.get(username="bench-owner"))
    print(f"\n{'page':<46} {'median ms':>10} {'max ms':>8} {'queries':>8}")
    owner_pages = [(f"api job list of a user owning {OWNED_JOBS} jobs", "/api/jobs/", owner_client)]
    for label, url, client in [*((label, url, client) for label, url in pages()), *owner_pages]:
        timings = []
        queries = 0
        for _ in range(repeat):
            reset_queries()
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise SystemExit(f"{label}: HTTP {response.status_code} for {url}")
            queries = len(captured.captured_queries)
        print(f"{label:<46} {statistics.median(timings):>10.1f} {max(timings):>8.1f} {queries:>8}")
        if verbose:
            for query in captured.captured_queries:
                print(f"    {float(query['time']) * 1000:8.1f} ms  {query['sql'][:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="how many jobs to seed")
    parser.add_argument("--repeat", type=int, default=7, help="requests per page (median reported)")
    parser.add_argument("--database", help="benchmark database name (default: <name>_bench)")
    parser.add_argument("--reseed", action="store_true", help="seed again even if the count matches")
    parser.add_argument("--verbose", action="store_true", help="print every query of each page and its time")
    args = parser.parse_args()

    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("JOBQUEUE_QUEUES", BENCH_QUEUES)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    from jobsite import embedded

    base_url = os.environ.get("DATABASE_URL") or embedded.postgres_url()
    url, name = bench_database_url(base_url, args.database)
    ensure_database(url, name)
    os.environ["DATABASE_URL"] = url

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if args.reseed or job_count() != args.jobs:
        seed(args.jobs)
        vacuum_analyze()
    print(f"database {name}: {job_count():,} jobs")
    ensure_owner()
    time_pages(args.repeat, args.verbose)


if __name__ == "__main__":
    main()
