"""Counting that stays cheap at any size: the planner's estimate first, a capped count for small results."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Q

from queue_app import services
from queue_app.admin import JobAdmin, pagination
from queue_app.admin.pagination import EstimatedCountPaginator, count_rows, estimated_count
from queue_app.engine.counts import index_served
from queue_app.models import Job
from tests.admin.conftest import changelist, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")


def test_a_status_is_index_served_by_the_partial_index_whose_condition_holds_it():
    """Read from the model's partial indexes: one status, or statuses one index's condition
    holds, is counted from that index; statuses of two indexes, or one no index holds, are not."""
    assert index_served(Job.objects.filter(status="failed"))  # idx_jobs_failed_at
    assert index_served(Job.objects.filter(status="queued"))  # idx_jobs_live_status
    assert index_served(Job.objects.filter(Q(status="queued") | Q(status="processing")))
    assert not index_served(Job.objects.filter(Q(status="queued") | Q(status="failed")))
    assert not index_served(Job.objects.filter(status="no-such-status"))
    assert not index_served(Job.objects.filter(status="failed", queue="default"))


def test_small_results_are_counted_exactly():
    for _ in range(3):
        make_job()
    make_job("failed")
    assert count_rows(Job.objects.all(), limit=10) == (4, False)
    assert count_rows(Job.objects.filter(status="failed"), limit=10) == (1, False)
    assert count_rows(Job.objects.filter(status="cancelled"), limit=10) == (0, False)


def test_large_results_take_the_planners_estimate():
    for _ in range(12):
        make_job()
    analyze()
    assert estimated_count(Job.objects.all()) == 12
    assert count_rows(Job.objects.all(), limit=5) == (12, True)
    rows, is_estimate = count_rows(Job.objects.filter(status="queued"), limit=5)
    assert is_estimate and rows > 5


def test_stale_statistics_never_mean_an_unbounded_count():
    analyze()  # statistics of an empty table
    for _ in range(12):
        make_job()
    # The planner still expects no rows, so the count runs, and stops after limit + 1.
    assert count_rows(Job.objects.all(), limit=5) == (6, True)


def test_pages_stop_at_max_pages():
    for _ in range(12):
        make_job()
    paginator = EstimatedCountPaginator(Job.objects.order_by("-created_at", "-id"), per_page=2)
    paginator.max_pages = 3
    assert (paginator.count, paginator.is_estimate) == (12, False)
    assert paginator.num_pages == 3 and paginator.is_truncated
    assert len(paginator.page(3).object_list) == 2


def test_change_list_says_about_for_an_estimate(admin_client, monkeypatch):
    for _ in range(12):
        make_job()
    analyze()
    monkeypatch.setattr(EstimatedCountPaginator, "exact_count_limit", 5)
    monkeypatch.setattr(JobAdmin, "list_per_page", 5)
    html = admin_client.get(changelist()).content.decode()
    assert '<span class="result-count">about 12 jobs</span>' in html
    monkeypatch.setattr(EstimatedCountPaginator, "exact_count_limit", 100)
    html = admin_client.get(changelist()).content.decode()
    assert '<span class="result-count">12 jobs</span>' in html


def test_stale_statistics_do_not_overstate_what_an_index_counts(admin_client, monkeypatch):
    """Statistics from before jobs moved on (or were deleted) say nothing of a count the
    index answers: below the limit it is counted, whatever the planner expects."""
    jobs = [make_job() for _ in range(12)]
    analyze()
    # Fewer changes than autovacuum's threshold: the statistics still say 12 queued.
    Job.objects.filter(id__in=[job.id for job in jobs[:8]]).update(status="completed")
    assert estimated_count(Job.objects.filter(status="queued")) > 5
    assert count_rows(Job.objects.filter(status="queued"), limit=5) == (4, False)
    monkeypatch.setattr(EstimatedCountPaginator, "exact_count_limit", 5)
    html = admin_client.get(changelist("status__exact=queued")).content.decode()
    assert '<span class="result-count">4 jobs</span>' in html
    Job.objects.filter(status="completed").delete()
    assert estimated_count(Job.objects.all()) == 12
    assert count_rows(Job.objects.all(), limit=5) == (4, False)


def result_count(html: str) -> str:
    return html.split('<span class="result-count">', 1)[1].split("</span>", 1)[0]


def shown_rows(html: str) -> int:
    return html.count('name="_selected_action"')


def test_a_one_page_list_is_counted_by_its_rows_when_statistics_are_stale(admin_client, monkeypatch):
    """A list of one page shows every row that matches: a count stopped early by stale
    statistics ("about 6") must not stand over the 12 rows under it."""
    analyze()  # statistics of an empty table
    for _ in range(12):
        make_job()
    monkeypatch.setattr(EstimatedCountPaginator, "exact_count_limit", 5)
    assert count_rows(Job.objects.filter(status="queued"), limit=5) == (6, True)
    html = admin_client.get(changelist("status__exact=queued")).content.decode()
    assert shown_rows(html) == 12
    assert result_count(html) == "12 jobs"
    assert "12 results" in html


@pytest.fixture
def between_count_and_rows(monkeypatch):
    """Runs a change after the list's count and before its rows, as a worker settling jobs
    does meanwhile: the two statements read different snapshots."""
    changes = []

    def count_then_change(queryset, limit):
        counted = count_rows(queryset, limit)
        for change in changes:
            change()
        return counted

    monkeypatch.setattr(pagination, "count_rows", count_then_change)
    return changes.append


def test_a_count_taken_before_a_job_settled_never_reads_below_the_rows_shown(
    admin_client, between_count_and_rows
):
    make_job("failed")
    between_count_and_rows(lambda: make_job("failed"))
    html = admin_client.get(changelist("status__exact=failed")).content.decode()
    assert shown_rows(html) == 2
    assert result_count(html) == "2 jobs"
    assert "2 results" in html and "1 result" not in html


def test_a_last_page_short_of_what_it_asked_for_makes_the_count_exact(
    admin_client, monkeypatch, between_count_and_rows
):
    monkeypatch.setattr(JobAdmin, "list_per_page", 3)
    jobs = [make_job("failed") for _ in range(5)]
    # Counted 5 (page 2 asks for rows 4 and 5), then one is retried and leaves the list.
    between_count_and_rows(lambda: services.retry_job(jobs[0].id))
    html = admin_client.get(changelist("status__exact=failed&p=2")).content.decode()
    assert shown_rows(html) == 1
    assert result_count(html) == "4 jobs"
