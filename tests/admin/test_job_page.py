"""A job's page: its summary and log trail first, and Cancel / Retry buttons that run the list's
actions on this one job, for those allowed to change jobs."""

from __future__ import annotations

import pytest
from django.urls import reverse

from queue_app.models import Job, JobLog
from tests.admin.conftest import changelist, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def page(job) -> str:
    return reverse("admin:queue_app_job_change", args=[job.id])


def button(job, name: str) -> str:
    return reverse(f"admin:queue_app_job_{name}", args=[job.id])


def test_the_summary_and_the_trail_come_before_the_fields(admin_client):
    job = make_job("failed", error="ValueError: no lines")
    html = admin_client.get(page(job)).content.decode()
    summary, trail, fields = html.index("job-summary"), html.index("job-trail"), html.index("fieldset")
    assert summary < trail < fields
    assert "ValueError: no lines" in html[summary:trail]
    assert f'formaction="{button(job, "retry")}"' in html
    assert f'formaction="{button(job, "cancel")}"' not in html  # a failed job cannot be cancelled


def test_the_cancel_button_cancels_a_queued_job(admin_client):
    job = make_job()
    assert f'formaction="{button(job, "cancel")}"' in admin_client.get(page(job)).content.decode()
    response = admin_client.post(button(job, "cancel"))
    assert response.status_code == 302 and response["Location"] == page(job)
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert JobLog.objects.filter(job=job, event="cancelled").exists()
    assert "Cancelled 1 job." in admin_client.get(page(job)).content.decode()


def test_the_retry_button_requeues_a_failed_job(admin_client):
    job = make_job("failed")
    admin_client.post(button(job, "retry"))
    job.refresh_from_db()
    assert job.status == "queued"


def test_a_button_on_a_job_in_another_status_changes_nothing_and_says_why(admin_client):
    job = make_job("completed")
    admin_client.post(button(job, "retry"))
    assert Job.objects.get(id=job.id).status == "completed"
    assert "cannot retry a job that is completed" in admin_client.get(page(job)).content.decode()


def test_viewers_see_no_buttons_and_may_not_post_them(user_client):
    job = make_job("failed")
    viewer = user_client("view_job", "view_joblog")
    html = viewer.get(page(job)).content.decode()
    assert "job-summary" in html and "formaction" not in html
    assert viewer.post(button(job, "retry")).status_code == 403
    assert Job.objects.get(id=job.id).status == "failed"


def test_a_button_answers_only_post(admin_client):
    job = make_job()
    assert admin_client.get(button(job, "cancel")).status_code == 405
    assert Job.objects.get(id=job.id).status == "queued"


def test_the_list_is_titled_jobs_not_select_job_to_change(admin_client):
    make_job()
    html = admin_client.get(changelist()).content.decode()
    assert "Select job to change" not in html and "<h1>Jobs</h1>" in html
