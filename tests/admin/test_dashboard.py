"""The queue dashboard: counts, Redis next to PostgreSQL, outbox, throughput, failures, charts."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from queue_app import broker, services
from queue_app.admin import dashboard
from queue_app.engine import stats as engine_stats
from queue_app.models import Job, JobLog, OutboxMessage
from tests.admin.conftest import make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

URL = "/admin/queue_app/job/dashboard/"


def relay(jobs, *, popped: bool = False) -> None:
    """Apply these jobs' pending intents to Redis and mark them dispatched, as the relay does;
    ``popped``: a worker has since taken the ids out again."""
    rows = OutboxMessage.objects.filter(job__in=jobs, dispatched_at__isnull=True)
    if not popped:
        intents = [
            broker.Intent(row.action, str(row.job_id), row.queue, row.queue == "reports", row.score)
            for row in rows
        ]
        broker.apply(broker.get_client(), intents)
    rows.update(dispatched_at=timezone.now())


@pytest.fixture
def busy_queues(queues, redis_client, relay_path):
    """default: two queued (one relayed), one completed, one failed; emails: one scheduled
    (relayed); reports (FIFO): one queued (relayed) plus a stray id in Redis."""
    default_relayed, default_waiting = make_job(), make_job()
    completed = make_job("completed")
    failed = make_job("failed", type="demo.fail", error="RuntimeError: the dashboard shows this")
    scheduled = services.enqueue_job("demo.echo", queue="emails", run_at=timezone.now() + timedelta(hours=1))
    reports = make_job(queue="reports")
    relay([default_relayed, scheduled, reports])
    relay([completed, failed], popped=True)
    redis_client.rpush(broker.fifo_key("reports"), "00000000-0000-0000-0000-000000000000")
    return {"waiting": default_waiting, "failed": failed, "completed": completed}


def test_counts_redis_depth_drift_and_outbox(admin_client, busy_queues):
    response = admin_client.get(URL)
    assert response.status_code == 200
    snap = response.context["snapshot"]
    queues = {queue.name: queue for queue in snap.queues}
    assert list(queues) == ["default", "emails", "reports"]

    default = queues["default"]
    assert (default.queued, default.statuses["completed"], default.statuses["failed"]) == (2, 1, 1)
    assert default.redis == {"priority": 1, "fifo": 0, "retry": 0}
    assert default.drift == -1 and default.outbox_pending == 1

    emails = queues["emails"]
    assert (emails.queued, emails.scheduled, emails.redis["retry"], emails.drift) == (1, 1, 1, 0)

    reports = queues["reports"]
    assert reports.fifo and reports.redis["fifo"] == 2 and reports.drift == 1

    assert snap.totals == {
        "waiting": 0,
        "queued": 4,
        "processing": 0,
        "cancelling": 0,
        "completed": 1,
        "failed": 1,
        "cancelled": 0,
        "expired": 0,
    }
    assert snap.total_jobs == 6
    assert not snap.estimated
    assert snap.outbox_pending == 1 and snap.outbox_oldest_age is not None

    html = response.content.decode()
    row = re.search(r'<tr class="queue-depth" data-queue="default">.*?</tr>', html, re.S).group(0)
    assert '<td class="number drift drift-nonzero">-1</td>' in row
    assert '<td class="number outbox-pending">1</td>' in row
    assert 'id="card-outbox">1<' in html


@pytest.fixture
def old_completion(db):
    """A job that finished two hours ago: outside the throughput window."""
    job = make_job("completed")
    two_hours_ago = timezone.now() - timedelta(hours=2)
    JobLog.objects.filter(job=job).update(created_at=two_hours_ago)
    Job.objects.filter(id=job.id).update(completed_at=two_hours_ago)
    relay([job], popped=True)
    return job


def test_throughput_and_recent_failures(admin_client, old_completion, busy_queues):
    snap = admin_client.get(URL).context["snapshot"]
    assert len(snap.throughput) == dashboard.THROUGHPUT_MINUTES
    assert (snap.completed_last_hour, snap.failed_last_hour) == (1, 1)
    assert snap.throughput[-1].start <= timezone.now() < snap.throughput[-1].start + timedelta(minutes=1)

    (failure,) = snap.recent_failures
    assert failure.job_id == str(busy_queues["failed"].id)
    assert (failure.type, failure.queue, failure.event) == ("demo.fail", "default", "failed")
    assert failure.error == "RuntimeError: the dashboard shows this"


def test_charts_are_inline_svg_and_nothing_loads_from_elsewhere(admin_client, busy_queues):
    html = admin_client.get(URL).content.decode()
    assert html.count('<svg class="queue-chart"') == 3
    assert re.search(r'<g class="bar" data-label="failed" data-value="1">', html)
    assert re.search(r'<g class="column" data-label="\d\d:\d\d" data-total="2">', html)
    external = re.findall(r'(?:src|href)="(?:https?:)?//[^"]*"', html)
    assert external == [], external
    assert '<script src="/static/queue_app/dashboard.js"' in html
    assert '<meta http-equiv="refresh"' in html  # inside <noscript>: the refresh without JavaScript


def test_fragment_is_the_refreshing_part_with_fresh_figures(admin_client, busy_queues):
    before = admin_client.get(URL + "?fragment=1").content.decode()
    assert "<html" not in before and 'id="card-queued">4<' in before
    make_job()
    after = admin_client.get(URL + "?fragment=1").content.decode()
    assert 'id="card-queued">5<' in after


def test_unreachable_redis_is_reported_not_fatal(admin_client, busy_queues, monkeypatch):
    closed_port = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    monkeypatch.setattr(broker, "get_client", lambda: closed_port)
    response = admin_client.get(URL)
    assert response.status_code == 200
    snap = response.context["snapshot"]
    assert snap.redis_error.startswith("Redis could not be read")
    assert all(queue.redis is None and queue.drift is None for queue in snap.queues)
    assert "Redis could not be read" in response.content.decode()
    assert snap.totals["queued"] == 4


def test_large_finished_counts_are_marked_as_estimates(admin_client, busy_queues, monkeypatch):
    for _ in range(4):
        make_job("completed")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")
    # 5 completed jobs are "many", the 4 queued ones still few.
    monkeypatch.setattr(engine_stats, "EXACT_COUNT_LIMIT", 4)
    response = admin_client.get(URL)
    snap = response.context["snapshot"]
    assert "completed" in snap.estimated
    assert "queued" not in snap.estimated and snap.totals["queued"] == 4
    assert 'id="card-completed">&asymp;&#8239;' in response.content.decode()


def test_dashboard_is_linked_from_the_index_and_the_job_list(admin_client):
    assert URL in admin_client.get(reverse("admin:index")).content.decode()
    assert URL in admin_client.get(reverse("admin:queue_app_job_changelist")).content.decode()


def test_first_log_id_since_bisects_the_trail(db):
    jobs = [make_job() for _ in range(6)]
    ids = list(JobLog.objects.filter(job__in=jobs).order_by("id").values_list("id", flat=True))
    long_ago = timezone.now() - timedelta(hours=3)
    JobLog.objects.filter(id__in=ids[:4]).update(created_at=long_ago)
    assert dashboard.first_log_id_since(timezone.now() - timedelta(hours=1)) == ids[4]
    assert dashboard.first_log_id_since(long_ago - timedelta(seconds=1)) == ids[0]
    assert dashboard.first_log_id_since(timezone.now() + timedelta(minutes=1)) is None
    Job.objects.all().delete()
    assert dashboard.first_log_id_since(long_ago) is None


def test_stale_statistics_do_not_overstate_a_status(admin_client, monkeypatch):
    """ANALYZE saw 12 queued jobs; 8 have finished since (under autovacuum's threshold).
    The queued count stops at the limit, so it is known exact; completed is the estimate."""
    jobs = [make_job() for _ in range(12)]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")
    Job.objects.filter(id__in=[job.id for job in jobs[:8]]).update(status="completed")
    monkeypatch.setattr(engine_stats, "EXACT_COUNT_LIMIT", 5)
    snap = admin_client.get(URL).context["snapshot"]
    assert snap.totals["queued"] == 4 and "queued" not in snap.estimated
    # Past the limit: at least limit + 1, whatever the statistics say (they had none completed).
    assert snap.totals["completed"] == 6 and "completed" in snap.estimated
