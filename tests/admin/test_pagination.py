"""Counting that stays cheap at any size: the planner's estimate first, a capped count for small results."""

from __future__ import annotations

import pytest
from django.db import connection

from queue_app.admin import JobAdmin
from queue_app.admin.pagination import EstimatedCountPaginator, count_rows, estimated_count
from queue_app.models import Job
from tests.admin.conftest import changelist, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")


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
