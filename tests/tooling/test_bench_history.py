"""scripts/bench/history.py, behind ``./dev bench --history``: the history it generates looks
like what the queue itself leaves (finished jobs only, each with a log trail that opens with
its enqueue and closes with its status), and every read page it times answers over it."""

from __future__ import annotations

import sys
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from queue_app.states import TERMINAL
from tests.helpers import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "scripts" / "bench"))
import history  # noqa: E402 - the benchmark's own folder, put on the path above


def _rows(query: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query)
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)  # the fill ends with VACUUM, outside any transaction
def test_the_history_is_finished_jobs_with_their_trails_over_ninety_days():
    history.fill(4500)
    assert history.history_count() == 4500
    statuses = dict(_rows("SELECT status, count(*) FROM queue_app_jobs GROUP BY status"))
    assert set(statuses) <= {str(status) for status in TERMINAL}
    assert statuses["completed"] > 3500 and statuses.get("failed", 0) > 100
    [(oldest, newest)] = _rows(
        "SELECT extract(day FROM now() - min(created_at)), extract(day FROM now() - max(created_at))"
        "  FROM queue_app_jobs"
    )
    assert oldest == 90 and newest == 1
    trails = _rows(
        """SELECT j.status, array_agg(l.event ORDER BY l.created_at, l.id)
             FROM queue_app_jobs j JOIN queue_app_job_logs l ON l.job_id = j.id GROUP BY j.id, j.status"""
    )
    assert len(trails) == 4500
    for status, events in trails:
        assert events[0] == "enqueued" and events[-1] == status, (status, events)


@pytest.mark.django_db(transaction=True)
def test_the_history_ids_are_made_as_the_queue_makes_them_in_time_order():
    """Version 7, their first 48 bits the row's creation in Unix ms: random ids would scatter
    the history over every index the queue's own inserts append to."""
    history.fill(1000)
    history.fill(2000)  # a larger size, as the run's next: in time order all the same
    rows = _rows("SELECT id, floor(extract(epoch FROM created_at) * 1000)::bigint FROM queue_app_jobs")
    assert len(rows) == 2000
    for job_id, millis in rows:
        assert job_id.version == 7 and job_id.variant == uuid.RFC_4122, job_id
        assert job_id.int >> 80 == millis, (job_id, millis)
    by_time = [job_id for job_id, _ in sorted(rows, key=lambda row: (row[1], row[0]))]
    assert by_time == sorted(job_id for job_id, _ in rows)


@pytest.mark.django_db(transaction=True)
def test_every_page_the_history_benchmark_times_answers_over_it():
    history.fill(500)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("bench-check", password="x"))
    for label, url in history.pages():
        assert client.get(url).status_code == 200, label


@pytest.mark.django_db(transaction=True)
def test_the_prune_it_times_deletes_the_oldest_days_and_their_trails_only():
    history.fill(3000)
    history.fill(9000)  # the run's sizes come in turn: the largest spreads over 90 days all the same
    rate = history.prune_rate(6)
    # The history spreads 9,000 jobs evenly over 90 days: the oldest 6 days hold about 600.
    assert 450 <= rate["prune_jobs"] <= 750, rate
    assert history.history_count() == 9000 - rate["prune_jobs"]
    [(oldest_days,)] = _rows("SELECT extract(day FROM now() - min(created_at)) FROM queue_app_jobs")
    assert oldest_days < 86
    assert _rows(
        "SELECT count(*) FROM queue_app_job_logs l"
        " WHERE NOT EXISTS (SELECT FROM queue_app_jobs j WHERE j.id = l.job_id)"
    ) == [(0,)]
    assert rate["prune_jobs_per_s"] > 0
