"""The admin list and the dashboard show 'ExceptionType: message'; the job page keeps the traceback folded."""

from __future__ import annotations

import pytest
from django.urls import reverse

from queue_app import services
from queue_app.engine import execution
from tests.admin.conftest import changelist
from tests.helpers import claim_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

TRACEBACK = (
    'Traceback (most recent call last):\n  File "/srv/app/x.py", line 1, in run\nValueError: bad input\n'
)


@pytest.fixture
def failed_job():
    job = services.enqueue_job("demo.echo", {})
    (claimed,) = claim_jobs([str(job.id)], worker_id="display-test")
    execution.fail_job(claimed.id, claimed.fence, "ValueError: bad input", retry=False, traceback=TRACEBACK)
    return job


def test_list_and_dashboard_show_the_summary_not_the_traceback(admin_client, failed_job):
    listing = admin_client.get(changelist()).content.decode()
    assert ">ValueError: bad input</span>" in listing
    assert "Traceback (most recent call last)" not in listing
    dashboard = admin_client.get(reverse("admin:queue_app_job_dashboard")).content.decode()
    assert "ValueError: bad input" in dashboard
    assert "Traceback (most recent call last)" not in dashboard


def test_job_page_shows_the_traceback_once_folded(admin_client, failed_job):
    page = admin_client.get(reverse("admin:queue_app_job_change", args=[failed_job.id])).content.decode()
    assert page.count("Traceback (most recent call last)") == 1
    assert '<details class="job-traceback"><summary>Traceback</summary>' in page
