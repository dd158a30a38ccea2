"""django.tasks with an expiry and a concurrency key: ``@task(expires_in=..., concurrency_key=...)``."""

import pytest
from django.db import connection
from django.tasks import TaskResultStatus, task
from django.tasks.exceptions import InvalidTask

from queue_app.engine import execution
from queue_app.models import Job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@task(expires_in=60, concurrency_key="reports")
def expiring_sum(a: int, b: int) -> int:
    return a + b


def test_an_expired_task_never_runs_and_reads_failed_with_its_cause():
    result = expiring_sum.enqueue(1, 2)
    job = Job.objects.get(id=result.id)
    assert job.expires_at is not None and job.concurrency_key == "reports"
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_jobs SET expires_at = now() - interval '1 second' WHERE id = %s", [result.id]
        )
    assert execution.claim([result.id], worker_id="w").jobs == []
    final = expiring_sum.get_result(result.id)
    assert final.status == TaskResultStatus.FAILED
    assert final.errors[0].exception_class_path == "queue_app.exceptions.JobExpired"


def plain(a: int) -> int:
    return a


def test_a_bad_expiry_or_key_is_refused_as_invalid_task():
    with pytest.raises(InvalidTask, match="expires_in"):
        task(expires_in=-1)(plain)
    with pytest.raises(InvalidTask, match="concurrency_key"):
        task(concurrency_key="")(plain)
