"""``prune_jobs``: finished jobs past an age go, with their logs, in batches; nothing else does.

Ported from django-tasks' ``tests/tests/test_database_backend.py`` prune tests
(test_prunes_tasks, test_dry_run, the queue-name and backend filters).
"""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from queue_app.engine import retention
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import enqueue_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def finished(status: str, days_ago: float, **enqueue) -> Job:
    job = enqueue_job("demo.echo", {}, **enqueue)
    completed_at = timezone.now() - timedelta(days=days_ago)
    Job.objects.filter(id=job.id).update(status=status, completed_at=completed_at)
    return job


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prune_jobs", *args, stdout=out)
    return out.getvalue()


def exists(job: Job) -> bool:
    return Job.objects.filter(id=job.id).exists()


def test_prunes_finished_jobs_by_age_and_status():
    """django-tasks test_prunes_tasks: completed and failed ages apart."""
    completed, failed = finished("completed", 3), finished("failed", 3)
    queued = enqueue_job("demo.echo", {})

    prune()  # default 14 days: both too young
    assert exists(completed) and exists(failed)

    prune("--min-age-days", "2", "--failed-min-age-days", "5")
    assert not exists(completed) and exists(failed)
    assert not JobLog.objects.filter(job_id=completed.id).exists()
    assert not OutboxMessage.objects.filter(job_id=completed.id).exists()

    prune("--min-age-days", "2", "--failed-min-age-days", "1")
    assert not exists(failed)
    assert exists(queued)


def test_dry_run_deletes_nothing():
    """django-tasks test_dry_run."""
    job = finished("completed", 30)
    assert "would delete 1 completed job(s)" in prune("--dry-run")
    assert exists(job)


def test_status_and_queue_filters(queue_config):
    queue_config(QUEUES="default,bulk")
    cancelled, completed = finished("cancelled", 30), finished("completed", 30)
    elsewhere = finished("cancelled", 30, queue="bulk")

    prune("--status", "cancelled", "--queue", "default")
    assert not exists(cancelled)
    assert exists(completed) and exists(elsewhere)


def test_backend_filter_only_prunes_that_alias():
    """django-tasks prune_db_task_results --backend."""
    mine = finished("completed", 30)
    Job.objects.filter(id=mine.id).update(backend="default")
    other = finished("completed", 30)
    Job.objects.filter(id=other.id).update(backend="other")

    prune("--backend", "default")
    assert not exists(mine) and exists(other)


def test_deletes_in_batches():
    jobs = [finished("completed", 30) for _ in range(5)]
    with CaptureQueriesContext(connection) as queries:
        assert "deleted 5 completed job(s)" in prune("--batch-size", "2")
    deletes = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith('DELETE FROM "queue_app_jobs"')
    ]
    assert len(deletes) == 3
    assert not any(exists(job) for job in jobs)


def test_a_long_prune_prints_its_running_totals(monkeypatch):
    monkeypatch.setattr(retention, "PROGRESS_EVERY_SECONDS", 0)  # every batch, not every 5 s
    for _ in range(5):
        finished("completed", 30)
    lines = prune("--status", "completed", "--batch-size", "2").splitlines()
    assert lines == [
        "prune progress after 0s: deleted completed=2",
        "prune progress after 0s: deleted completed=4",
        "prune progress after 0s: deleted completed=5",
        "deleted 5 completed job(s)",
    ]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--status", "queued"), "--status"),
        (("--queue", "nope"), "--queue: unknown queue"),
        (("--queue", " , "), "--queue: name at least one queue"),
        (("--queue", ""), "--queue: name at least one queue"),
        (("--min-age-days", "-1"), "--min-age-days must be from 0 to 36500 days, not -1"),
        (("--min-age-days", "nan"), "--min-age-days must be from 0 to 36500 days, not nan"),
        (("--min-age-days", "inf"), "--min-age-days must be from 0 to 36500 days, not inf"),
        (("--min-age-days", "1000000"), "--min-age-days must be from 0 to 36500 days, not 1e\\+06"),
        (("--failed-min-age-days", "nan"), "--failed-min-age-days must be from 0 to 36500 days, not nan"),
        (("--batch-size", "0"), "--batch-size"),
        (("--backend", "nope"), "--backend: unknown backend 'nope'; configured: default"),
    ],
)
def test_bad_arguments_name_the_option(args, field):
    job = finished("completed", 30)
    with pytest.raises(CommandError, match=field):
        prune("--min-age-days", "1", *args)
    assert exists(job)
