"""POST /api/jobs/: a valid request creates one job with its log and outbox rows."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from queue_app.models import Job, JobLog, OutboxMessage
from tests.api.conftest import submit

pytestmark = pytest.mark.redis

JOB_FIELDS = {
    "id",
    "type",
    "queue",
    "payload",
    "priority",
    "priority_value",
    "status",
    "attempts",
    "max_attempts",
    "snoozes",
    "run_at",
    "next_retry_at",
    "created_at",
    "started_at",
    "completed_at",
    "progress",
    "progress_message",
    "progress_at",
    "last_error",
    "last_error_traceback",
    "result",
    "idempotency_key",
    "unique_key",
    "expires_at",
    "concurrency_key",
    "logs",
}


@pytest.mark.django_db
def test_create_returns_201_with_the_full_representation(api, alice):
    response = submit(api, type="demo.echo", payload={"invoice": 42}, priority="high")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert set(body) == JOB_FIELDS
    job = Job.objects.get()
    assert body["id"] == str(job.id)
    assert response["Location"] == f"/api/jobs/{job.id}/"
    assert body["logs"] == f"http://testserver/api/jobs/{job.id}/logs/"
    assert (body["type"], body["queue"], body["priority"], body["status"]) == (
        "demo.echo",
        "default",
        "high",
        "queued",
    )
    assert body["payload"] == {"invoice": 42}
    assert body["attempts"] == 0 and body["max_attempts"] == 3 and body["snoozes"] == 0
    assert (body["progress"], body["progress_message"], body["progress_at"]) == (None, "", None)
    assert body["result"] is None and body["next_retry_at"] is None and body["idempotency_key"] is None
    assert datetime.fromisoformat(body["created_at"]) == job.created_at
    assert job.owner == alice
    assert JobLog.objects.filter(job=job, event="enqueued").count() == 1
    assert OutboxMessage.objects.get(job=job).action == "enqueue"


@pytest.mark.django_db
def test_defaults_come_from_the_handler_then_the_settings(api):
    probe = submit(api, type="probe.run").json()
    demo = submit(api, type="demo.echo", max_attempts=7).json()

    assert probe["max_attempts"] == 5  # registered with max_attempts=5
    assert probe["priority"] == "medium" and probe["payload"] == {}
    assert demo["max_attempts"] == 7


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("given", "tier", "value"),
    [(-5, "low", -5), (0, "medium", 0), (100, "high", 100), (-100, "low", -100), ("high", "high", 10)],
)
def test_priority_is_a_named_tier_or_an_integer_from_minus_100_to_100(api, given, tier, value):
    """As enqueue_job and django.tasks take it (docs/reference/rest-api.md says the same)."""
    body = submit(api, type="demo.echo", priority=given).json()
    assert (body["priority"], body["priority_value"]) == (tier, value)
    job = Job.objects.get(id=body["id"])
    assert (job.priority, job.priority_value) == (tier, value)


@pytest.mark.django_db
def test_an_invalid_priority_is_refused_with_what_is_valid(api):
    response = submit(api, type="demo.echo", priority=-500)
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "priority": ["Must be one of high, medium, low, or an integer from -100 to 100."]
    }
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_run_at_with_an_offset_schedules_the_job(api):
    response = submit(api, run_at="2055-01-31T09:00:00+02:00")

    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert job.next_retry_at == datetime(2055, 1, 31, 7, 0, tzinfo=UTC)
    assert OutboxMessage.objects.get(job=job).action == "schedule"


@pytest.mark.django_db
def test_the_latest_run_at_is_accepted_and_one_microsecond_more_is_refused_with_the_limit(api):
    assert submit(api, run_at="2305-06-05T23:47:34.740991Z").status_code == 201
    refused = submit(api, run_at="2305-06-05T23:47:34.740992Z")

    assert refused.status_code == 400
    message = refused.json()["errors"]["run_at"][0]
    assert "2305-06-05T23:47:34.740991+00:00" in message, message
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_delay_seconds_schedules_the_job_from_now(api):
    before = timezone.now()
    response = submit(api, delay_seconds=3600)

    assert response.status_code == 201, response.json()
    due = Job.objects.get().next_retry_at
    assert before + timedelta(seconds=3600) <= due <= timezone.now() + timedelta(seconds=3600)


@pytest.mark.django_db
def test_a_past_run_at_and_a_zero_delay_mean_now(api):
    assert submit(api, run_at="2001-01-01T00:00:00Z").status_code == 201
    assert submit(api, delay_seconds=0).status_code == 201
    assert set(Job.objects.values_list("next_retry_at", flat=True)) == {None}
    assert set(OutboxMessage.objects.values_list("action", flat=True)) == {"enqueue"}


@pytest.mark.django_db
def test_sql_looking_strings_are_stored_and_returned_unchanged(api):
    nasty = "'; DROP TABLE jobs; -- \" OR 1=1 /* $1 %s %(x)s"
    response = submit(api, payload={nasty: nasty, "list": [nasty]}, idempotency_key=nasty)

    assert response.status_code == 201, response.json()
    assert response.json()["payload"] == {nasty: nasty, "list": [nasty]}
    assert response.json()["idempotency_key"] == nasty
    job = Job.objects.get()
    assert job.payload[nasty] == nasty and job.idempotency_key == nasty


@pytest.mark.django_db
def test_unicode_and_boundary_numbers_round_trip(api):
    payload = {"text": "żółć 🚀 \u2028", "big": 2**63 - 1, "small": -(2**63) + 1, "float": 0.25}
    response = submit(api, payload=payload)

    assert response.status_code == 201, response.json()
    assert Job.objects.get().payload == payload
    assert api.get(f"/api/jobs/{response.json()['id']}/").json()["payload"] == payload
