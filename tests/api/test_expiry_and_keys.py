"""Expiry and concurrency keys over the REST API: create, read back, filter, queue limits."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queue_app.engine import execution
from queue_app.models import Job
from tests.api.conftest import submit


def _expire(job_id: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_jobs SET expires_at = now() - interval '1 second' WHERE id = %s", [job_id]
        )


@pytest.mark.django_db
def test_create_takes_expires_in_and_a_concurrency_key(api):
    before = timezone.now()
    response = submit(api, expires_in=90, concurrency_key="customer:42")
    assert response.status_code == 201, response.json()
    body = response.json()
    job = Job.objects.get()
    assert body["concurrency_key"] == "customer:42" == job.concurrency_key
    assert before + timedelta(seconds=89) < job.expires_at < timezone.now() + timedelta(seconds=91)
    assert body["expires_at"] is not None


@pytest.mark.django_db
def test_create_takes_expires_at_and_refuses_both_at_once(api):
    at = (timezone.now() + timedelta(hours=1)).isoformat()
    assert submit(api, expires_at=at).status_code == 201
    both = submit(api, expires_at=at, expires_in=5)
    assert both.status_code == 400
    assert set(both.json()["errors"]) >= {"expires_at", "expires_in"}
    for bad in (0, -3, "soon", True):
        wrong = submit(api, expires_in=bad)
        assert wrong.status_code == 400 and "expires_in" in wrong.json()["errors"]
    assert Job.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.redis
def test_the_list_filters_expired_jobs(api):
    gone = submit(api, expires_in=60).json()["id"]
    kept = submit(api).json()["id"]
    _expire(gone)
    execution.claim([gone, kept], worker_id="w")
    listed = api.get("/api/jobs/", {"status": "expired"}).json()["results"]
    assert [job["id"] for job in listed] == [gone]
    assert api.get(f"/api/jobs/{gone}/").json()["status"] == "expired"
    assert [log["event"] for log in api.get(f"/api/jobs/{gone}/logs/").json()["results"]][-1] == "expired"


@pytest.mark.django_db
def test_staff_set_per_key_limits(staff_api):
    response = staff_api.patch(
        "/api/queues/default/",
        data={"key_concurrency_limit": 2, "key_rate_limit": 0.5},
        content_type="application/json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["key_concurrency_limit"] == 2 and response.json()["key_rate_limit"] == 0.5
    bad = staff_api.patch(
        "/api/queues/default/", data={"key_concurrency_limit": 0}, content_type="application/json"
    )
    assert bad.status_code == 400
    assert staff_api.get("/api/queues/default/").json()["key_concurrency_limit"] == 2
