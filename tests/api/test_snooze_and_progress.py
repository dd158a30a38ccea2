"""A snoozed job and a running job's reports, as GET /api/jobs/{id}/ and its logs show them."""

import pytest

from queue_app.engine import execution
from queue_app.reports import CurrentJob
from queue_app.runtime.holdings import Attempt
from tests.api.conftest import submit
from tests.helpers import claim_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def claimed_job(api):
    job_id = submit(api, payload={"n": 1}).json()["id"]
    [claimed] = claim_jobs([job_id], worker_id="w")
    return claimed


def test_a_snoozed_job_reads_queued_with_its_next_run_and_no_attempt(api):
    claimed = claimed_job(api)
    assert execution.snooze_job(claimed.id, claimed.fence, 90) == "queued"

    body = api.get(f"/api/jobs/{claimed.id}/").json()

    assert body["status"] == "queued" and body["attempts"] == 0 and body["snoozes"] == 1
    assert body["next_retry_at"] is not None and body["run_at"] == body["next_retry_at"]
    logs = api.get(f"/api/jobs/{claimed.id}/logs/").json()["results"]
    [snoozed] = [row for row in logs if row["event"] == "snoozed"]
    assert snoozed["extra"]["seconds"] == 90 and snoozed["extra"]["snoozes"] == 1
    assert snoozed["extra"]["next_retry_at"] is not None


# Committed data: inside a transaction (a non-transactional test's) reports wait for its end.
@pytest.mark.django_db(transaction=True)
def test_a_running_jobs_progress_and_log_lines_read_back_at_once(api):
    claimed = claimed_job(api)
    handle = CurrentJob(claimed, Attempt(claimed))
    assert handle.progress(3, 4, message="three of four")
    assert handle.log("converted", pages=3)

    body = api.get(f"/api/jobs/{claimed.id}/").json()
    logs = api.get(f"/api/jobs/{claimed.id}/logs/").json()["results"]

    assert body["status"] == "processing"
    assert (body["progress"], body["progress_message"]) == (0.75, "three of four")
    assert body["progress_at"] is not None
    assert [(row["event"], row["level"], row["message"], row["extra"]) for row in logs][-1] == (
        "job_log",
        "info",
        "converted",
        {"pages": 3},
    )


def test_a_job_that_never_reported_reads_null_progress(api):
    body = submit(api).json()
    assert (body["progress"], body["progress_message"], body["progress_at"], body["snoozes"]) == (
        None,
        "",
        None,
        0,
    )


def test_the_schema_describes_the_new_fields(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    job = schema["components"]["schemas"]["Job"]["properties"]
    assert job["progress"]["type"] == "number" and job["progress"]["nullable"] is True
    assert job["snoozes"]["type"] == "integer" and job["snoozes"]["readOnly"] is True
    assert job["progress_at"]["format"] == "date-time"
    assert "Snooze" in job["snoozes"]["description"]
