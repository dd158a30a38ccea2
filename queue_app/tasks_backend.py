"""A backend for Django's ``django.tasks``: ``@task`` functions run as durable jobs.

``some_task.enqueue(...)`` creates a job of the internal type ``django.task``
through ``enqueue_job`` (so it joins the caller's transaction and gets its
outbox row); a worker imports the task by its module path, checks that it
really is a ``@task`` function, and calls it. The API never accepts this type:
only code can name a task.

    TASKS = {"default": {"BACKEND": "queue_app.tasks_backend.JobQueueBackend"}}
"""

from __future__ import annotations

from typing import Any

from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from queue_app.conf import queue_settings
from queue_app.handlers import current_job, job_handler
from queue_app.ids import parse_job_id
from queue_app.models import Job
from queue_app.services import enqueue_job
from queue_app.states import Priority, Status

TASK_JOB_TYPE = "django.task"

_STATUS = {
    Status.QUEUED: TaskResultStatus.READY,
    Status.PROCESSING: TaskResultStatus.RUNNING,
    Status.COMPLETED: TaskResultStatus.SUCCESSFUL,
    Status.FAILED: TaskResultStatus.FAILED,
    Status.CANCELLED: TaskResultStatus.FAILED,
}


def _priority(task_priority: int) -> str:
    """Django's -100..100 (higher runs sooner) onto the three tiers."""
    if task_priority > 0:
        return Priority.HIGH
    return Priority.MEDIUM if task_priority == 0 else Priority.LOW


class JobQueueBackend(BaseTaskBackend):
    supports_defer = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if task.queue_name not in queue_settings().QUEUES:
            raise InvalidTask(f"Queue '{task.queue_name}' is not a configured JOBQUEUE queue.")

    def enqueue(self, task: Task, args, kwargs) -> TaskResult:
        self.validate_task(task)
        payload = {"task": task.module_path, "args": normalize_json(args), "kwargs": normalize_json(kwargs)}
        job = enqueue_job(
            TASK_JOB_TYPE,
            payload,
            priority=_priority(task.priority),
            queue=task.queue_name,
            run_at=task.run_after,
        )
        return self._result(job, task)

    def get_result(self, result_id: str) -> TaskResult:
        job = Job.objects.filter(id=result_id, type=TASK_JOB_TYPE).first() if _is_uuid(result_id) else None
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result(job, _load_task(job.payload["task"]))

    def _result(self, job: Job, task: Task) -> TaskResult:
        result = TaskResult(
            task=task,
            id=str(job.id),
            status=_STATUS[job.status],
            enqueued_at=job.enqueued_at,
            started_at=job.started_at,
            last_attempted_at=job.started_at,
            finished_at=job.completed_at,
            args=job.payload["args"],
            kwargs=job.payload["kwargs"],
            backend=self.alias,
            errors=[TaskError(exception_class_path="", traceback=job.last_error)] if job.last_error else [],
            worker_ids=[job.worker_id] if job.worker_id else [],
        )
        object.__setattr__(result, "_return_value", job.result)
        return result


def _is_uuid(value: str) -> bool:
    return parse_job_id(value) is not None


def _load_task(module_path: str) -> Task:
    """Only objects made by ``@task`` run: a module path naming anything else is refused."""
    task = import_string(module_path)
    if not isinstance(task, Task):
        raise InvalidTask(f"{module_path} is not a django.tasks Task")
    return task


@job_handler(TASK_JOB_TYPE, internal=True)
def run_django_task(payload: dict[str, Any]) -> Any:
    task = _load_task(payload["task"])
    args, kwargs = payload["args"], payload["kwargs"]
    if task.takes_context:
        backend = task.get_backend()
        job = Job.objects.get(id=current_job().id)
        return normalize_json(task.call(TaskContext(task_result=backend._result(job, task)), *args, **kwargs))
    return normalize_json(task.call(*args, **kwargs))
