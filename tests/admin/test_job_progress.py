"""The job page shows the progress a running attempt reported, its snoozes, and its log lines."""

from __future__ import annotations

import pytest
from django.urls import reverse

from queue_app.engine import execution
from queue_app.engine.execution import ClaimedJob
from queue_app.reports import CurrentJob
from queue_app.runtime.holdings import Attempt
from tests.admin.conftest import make_job

# Committed data: inside a transaction (a non-transactional test's) reports wait for its end.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def job_page(client, job) -> str:
    response = client.get(reverse("admin:queue_app_job_change", args=[job.id]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_job_page_shows_reported_progress_and_the_lines_in_its_trail(admin_client):
    job = make_job("processing")
    # The attempt make_job claimed, as its worker holds it.
    claimed = ClaimedJob(str(job.id), job.type, job.queue, job.payload, 1, job.max_attempts, job.fence)
    handle = CurrentJob(claimed, Attempt(claimed))
    assert handle.progress(2, 5, message="two files of five <b>")
    assert handle.log("copied report.csv", size=1024)

    page = job_page(admin_client, job)

    assert '<progress max="1" value="0.4">40 %</progress> 40 %' in page
    assert "two files of five &lt;b&gt;" in page
    assert "copied report.csv" in page and "job_log" in page
    assert "Progress reported at" in page


def test_a_job_that_never_reported_shows_no_progress_and_its_snoozes(admin_client):
    job = make_job("processing")
    execution.snooze_job(str(job.id), job.fence, 60)

    page = job_page(admin_client, job)

    assert "<progress" not in page
    assert "Snoozes" in page and "snoozed for 60 s" in page
