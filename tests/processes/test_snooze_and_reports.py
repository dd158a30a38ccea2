"""Snooze and a job's reports with real worker processes (``manage.py runworker``)."""

import subprocess

import pytest
from rest_framework.test import APIClient

from queue_app import services
from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job
from tests.helpers import manage, relay_all, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]


@pytest.fixture
def api(django_user_model) -> APIClient:
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_superuser("operator"))
    return client


def test_a_job_snoozes_in_a_worker_process_and_completes_on_its_first_attempt(processes, api):
    job = enqueue_job("probe.snooze", {"times": 2, "seconds": 1})
    relay_all()
    relay = manage("runrelay", stderr=subprocess.DEVNULL)  # carries each snooze's outbox row
    worker = manage("runworker", "--burst", "--with-scheduled", stderr=subprocess.DEVNULL)
    processes.extend([relay, worker])

    def snoozed():
        body = api.get(f"/api/jobs/{job.id}/").json()
        return body if body["snoozes"] >= 1 and body["status"] == "queued" else None

    # Between its runs the API shows it waiting for its time, no attempt charged.
    body = wait_until(snoozed, message="the first snooze")
    assert body["attempts"] == 0 and body["next_retry_at"] is not None
    assert worker.wait(timeout=120) == 0
    job.refresh_from_db()
    assert job.status == "completed" and job.attempts == 1 and job.snoozes == 2
    assert Execution.objects.filter(job_id=job.id).count() == 3


def test_a_cancel_racing_a_snooze_in_a_worker_process_wins(processes):
    job = enqueue_job("probe.snooze_on_cancel")
    relay_all()
    worker = manage("runworker", "--burst", stderr=subprocess.DEVNULL)
    processes.append(worker)
    wait_until(lambda: Execution.objects.filter(job_id=job.id).exists(), message="the job to start")
    # Asked of a running job; its worker, told at once, may have confirmed already by the time
    # the call reads the job back. The log below shows it went through the running job's path.
    assert services.cancel_job(job.id).status in {"cancelling", "cancelled"}
    assert worker.wait(timeout=120) == 0
    job.refresh_from_db()
    assert job.status == "cancelled" and job.snoozes == 0 and job.next_retry_at is None
    events = list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))
    assert events[-2:] == ["cancel_requested", "cancel_confirmed"] and "snoozed" not in events


def test_progress_and_log_lines_show_in_the_api_while_the_job_runs(processes, api, tmp_path):
    go = tmp_path / "go"
    job = enqueue_job("probe.report_and_wait", {"go": str(go)})
    relay_all()
    worker = manage("runworker", "--burst", stderr=subprocess.DEVNULL)
    processes.append(worker)

    body = wait_until(
        lambda: (b := api.get(f"/api/jobs/{job.id}/").json())["progress"] is not None and b,
        message="the job's first progress",
    )
    assert (body["status"], body["progress"], body["progress_message"]) == ("processing", 0.5, "halfway")
    logs = api.get(f"/api/jobs/{job.id}/logs/").json()["results"]
    assert [(row["event"], row["message"], row["extra"]) for row in logs if row["event"] == "job_log"] == [
        ("job_log", "waiting for the go", {"file": str(go)})
    ]

    go.touch()
    assert worker.wait(timeout=120) == 0
    job = Job.objects.get(id=job.id)
    # Reported within the interval of the first: kept, and written when the handler returned.
    assert (job.status, job.progress, job.progress_message) == ("completed", 1.0, "done")
