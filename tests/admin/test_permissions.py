"""Who gets into the job admin and the dashboard."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.admin.conftest import changelist, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

DASHBOARD = "admin:queue_app_job_dashboard"


def pages(job) -> list[str]:
    return [
        changelist(),
        reverse(DASHBOARD),
        reverse(DASHBOARD) + "?fragment=1",
        reverse("admin:queue_app_job_change", args=[job.id]),
        reverse("admin:queue_app_joblog_changelist"),
        reverse("admin:queue_app_outboxmessage_changelist"),
    ]


def test_anonymous_visitors_are_sent_to_the_login_page(client):
    job = make_job()
    for url in pages(job):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url


def test_non_staff_users_are_kept_out_even_with_every_permission(user_client):
    job = make_job()
    outsider = user_client(
        "view_job", "change_job", "view_joblog", "view_outboxmessage", staff=False, username="outsider"
    )
    for url in pages(job):
        response = outsider.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url


def test_staff_without_permissions_get_403_and_no_dashboard_link(user_client):
    job = make_job()
    staff = user_client()
    for url in pages(job):
        assert staff.get(url).status_code == 403, url
    assert reverse(DASHBOARD) not in staff.get(reverse("admin:index")).content.decode()


def test_view_permission_opens_the_list_the_trail_and_the_dashboard(user_client):
    job = make_job("failed")
    viewer = user_client("view_job")
    assert viewer.get(changelist()).status_code == 200
    detail = viewer.get(reverse("admin:queue_app_job_change", args=[job.id])).content.decode()
    # The log trail is part of the job's history: view_job is enough to read it.
    assert "log trail" in detail.lower() and ">claimed<" in detail
    assert viewer.get(reverse(DASHBOARD)).status_code == 200
    index = viewer.get(reverse("admin:index")).content.decode()
    assert reverse(DASHBOARD) in index
    # Viewing does not extend to the other models.
    assert viewer.get(reverse("admin:queue_app_outboxmessage_changelist")).status_code == 403
