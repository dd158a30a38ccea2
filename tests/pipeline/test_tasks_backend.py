"""django.tasks on the queue: @task functions become durable jobs, run by the queue's executor."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

from queue_app.models import Job, OutboxMessage
from queue_app.testing import run_jobs
from tests.probe.jobs import add, whoami

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def test_enqueued_task_is_a_job_that_runs():
    result = add.enqueue(2, 3)
    job = Job.objects.get(id=result.id)
    assert (job.type, job.priority, job.status) == ("django.task", "medium", "queued")
    assert job.payload == {
        "task": "tests.probe.jobs.add",
        "args": [2, 3],
        "kwargs": {},
        "priority": 0,
        "run_after": None,
    }
    assert result.status == TaskResultStatus.READY
    assert run_jobs().completed == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == {"sum": 5}


def test_context_and_priority_reach_the_job():
    result = whoami.enqueue()
    assert Job.objects.get(id=result.id).priority == "high"
    assert run_jobs().completed == 1
    assert task_backends["default"].get_result(result.id).return_value == {"id": result.id}


def test_task_enqueue_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        add.enqueue(1, 1)
        raise RuntimeError("roll back")
    assert not Job.objects.exists() and not OutboxMessage.objects.exists()


def test_deferred_task_waits_for_its_time():
    run_after = timezone.now() + timedelta(hours=1)
    result = add.using(run_after=run_after).enqueue(1, 2)
    assert Job.objects.get(id=result.id).next_retry_at == run_after


def test_a_failure_recorded_without_its_class_reads_as_a_plain_exception():
    """Jobs failed before every failure path named a class keep an empty last_error_class:
    Django's TaskError.exception_class imports the path, so an empty one would raise ImportError."""
    result = add.enqueue(1, 2)
    Job.objects.filter(id=result.id).update(status="failed", attempts=1, last_error="worker restarted")
    error = task_backends["default"].get_result(result.id).errors[0]
    assert error.exception_class is Exception and error.traceback == "worker restarted"


def test_unknown_result_id_does_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("not-a-job")


def test_the_api_cannot_submit_the_internal_task_type(client, django_user_model):
    user = django_user_model.objects.create_user("api-user", password="pw")
    client.force_login(user)
    response = client.post(
        "/api/jobs/",
        {"type": "django.task", "payload": {"task": "os.system", "args": ["true"], "kwargs": {}}},
        content_type="application/json",
    )
    assert response.status_code == 400 and "type" in response.json()["errors"]
    assert not Job.objects.exists()
