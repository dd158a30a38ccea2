"""POST /api/jobs/{id}/cancel/ and /retry/: through the services, 409 when they do not apply."""

import pytest

from queue_app import services
from queue_app.engine import execution
from queue_app.engine.execution import Completion
from queue_app.models import Job, JobLog, OutboxMessage
from tests.api.conftest import submit
from tests.helpers import claim_jobs

pytestmark = pytest.mark.redis


def _run_to(job_id: str, outcome: str) -> None:
    """Move a queued job on as a worker would: claim it, then settle it."""
    [claimed] = claim_jobs([job_id], worker_id="test-worker")
    if outcome == "completed":
        execution.complete_jobs([Completion(job_id, claimed.fence, {"ok": True})])
    elif outcome == "failed":
        execution.fail_job(job_id, claimed.fence, "boom", retry=False)


@pytest.mark.django_db
@pytest.mark.parametrize("start", ["queued", "processing"])
def test_cancel_a_queued_or_running_job(api, start):
    job_id = submit(api).json()["id"]
    if start == "processing":
        _run_to(job_id, "processing")

    response = api.post(f"/api/jobs/{job_id}/cancel/")

    assert response.status_code == 200, response.json()
    log = JobLog.objects.filter(job_id=job_id).last()
    if start == "queued":
        assert response.json()["status"] == "cancelled" and response.json()["completed_at"]
        assert Job.objects.get(id=job_id).status == "cancelled"
        assert (log.event, log.message) == ("cancelled", "cancelled by alice")
        assert OutboxMessage.objects.filter(job_id=job_id).last().action == "remove"
    else:
        # A running job is asked to cancel: cancelling until its worker stops the attempt.
        assert response.json()["status"] == "cancelling" and not response.json()["completed_at"]
        assert Job.objects.get(id=job_id).status == "cancelling"
        assert (log.event, log.message) == ("cancel_requested", "cancelled by alice")
        # Asking again changes nothing.
        assert api.post(f"/api/jobs/{job_id}/cancel/").json()["status"] == "cancelling"
        assert JobLog.objects.filter(job_id=job_id, event="cancel_requested").count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("finished", ["completed", "failed", "cancelled"])
def test_cancel_a_finished_job_is_409_and_changes_nothing(api, finished):
    job_id = submit(api).json()["id"]
    if finished == "cancelled":
        services.cancel_job(job_id)
    else:
        _run_to(job_id, finished)
    logs_before = JobLog.objects.count()

    response = api.post(f"/api/jobs/{job_id}/cancel/")

    assert response.status_code == 409
    assert response.json() == {"code": "conflict", "detail": f"cannot cancel a job that is {finished}"}
    assert Job.objects.get(id=job_id).status == finished
    assert JobLog.objects.count() == logs_before


@pytest.mark.django_db
@pytest.mark.parametrize("finished", ["failed", "cancelled"])
def test_retry_a_failed_or_cancelled_job(api, finished):
    job_id = submit(api, max_attempts=1).json()["id"]
    if finished == "cancelled":
        services.cancel_job(job_id)
    else:
        _run_to(job_id, "failed")

    response = api.post(f"/api/jobs/{job_id}/retry/")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["completed_at"] is None
    assert body["max_attempts"] >= body["attempts"] + 1
    assert JobLog.objects.filter(job_id=job_id).last().event == "retried"
    assert OutboxMessage.objects.filter(job_id=job_id).last().action == "enqueue"


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["queued", "processing", "completed"])
def test_retry_anything_else_is_409(api, state):
    job_id = submit(api).json()["id"]
    if state != "queued":
        _run_to(job_id, state)

    response = api.post(f"/api/jobs/{job_id}/retry/")

    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert Job.objects.get(id=job_id).status == state


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["cancel", "retry"])
def test_actions_on_another_users_job_are_404_and_change_nothing(api, bob_api, staff_api, action):
    job_id = submit(api).json()["id"]
    if action == "retry":
        services.cancel_job(job_id)
    status = Job.objects.get(id=job_id).status

    assert bob_api.post(f"/api/jobs/{job_id}/{action}/").status_code == 404
    assert Job.objects.get(id=job_id).status == status
    assert staff_api.post(f"/api/jobs/{job_id}/{action}/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["cancel", "retry"])
def test_actions_on_unknown_ids_are_404(api, action):
    assert api.post(f"/api/jobs/00000000-0000-0000-0000-000000000000/{action}/").status_code == 404
    assert api.post(f"/api/jobs/nope/{action}/").status_code == 404


@pytest.mark.django_db
def test_actions_accept_get_only_where_documented(api):
    job_id = submit(api).json()["id"]

    assert api.get(f"/api/jobs/{job_id}/cancel/").status_code == 405
    assert api.post(f"/api/jobs/{job_id}/logs/").status_code == 405
    assert api.delete(f"/api/jobs/{job_id}/").status_code == 405


@pytest.mark.django_db
def test_a_retry_that_raises_max_attempts_says_so(api):
    """A job that used its only attempt runs again because its max_attempts rises (attempts
    are never reset: they number the attempts in the job's log); the response and the log row say so."""
    used_up = submit(api, max_attempts=1).json()["id"]
    _run_to(used_up, "failed")
    cancelled_early = submit(api, max_attempts=3).json()["id"]
    services.cancel_job(cancelled_early)

    raised = api.post(f"/api/jobs/{used_up}/retry/").json()
    unchanged = api.post(f"/api/jobs/{cancelled_early}/retry/").json()

    assert (raised["attempts"], raised["max_attempts"]) == (1, 2)
    assert raised["max_attempts_raised"] == {"before": 1, "after": 2}
    assert unchanged["max_attempts"] == 3 and unchanged["max_attempts_raised"] is None
    entry = JobLog.objects.filter(job_id=used_up, event="retried").get()
    assert entry.extra == {"max_attempts_before": 1, "max_attempts": 2}
