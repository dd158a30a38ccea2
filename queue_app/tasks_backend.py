"""A backend for Django's ``django.tasks``: ``@task`` functions run as durable jobs.

``some_task.enqueue(...)`` creates a job of the internal type ``django.task``
through ``enqueue_job`` (so it joins the caller's transaction and gets its
outbox row); a worker imports the task by its module path, checks that it
really is a ``@task`` function, and calls it. The API never accepts this type:
only code can name a task.

    TASKS = {"default": {"BACKEND": "queue_app.tasks_backend.JobQueueBackend"}}

A task may ask to be unique, as Oban's workers do: ``@task(unique=True)``
(optionally ``unique_for=60``, ``unique_states=(...)``) enqueues no second job
for the same task, queue and arguments while one is queued or running (see
queue_app/engine/uniqueness.py); ``enqueue`` then returns the existing job's
result. Django's ``Task.using`` has no place for a key of the caller's choice,
so the key is made from the call.

Models are imported inside functions: this module is loaded by Django's task
registry before apps are ready, and a project without ``queue_app`` installed
must get a ``check`` error, not an import-time crash.
"""

from __future__ import annotations

import hashlib
import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.core import checks
from django.tasks import DEFAULT_TASK_QUEUE_NAME
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from queue_app.broker import LATEST_EXACT_TIME
from queue_app.conf import SettingError, queue_settings
from queue_app.exceptions import InvalidJob, Snooze, WorkerShutdown
from queue_app.handlers import current_job, job_handler
from queue_app.payloads import check_result
from queue_app.states import TASK_JOB_TYPE, Status

# Django's API has no retries: one attempt unless OPTIONS or @task(max_attempts=...) asks.
DEFAULT_MAX_ATTEMPTS = 1
# Same bound as the engine's (queue_app.engine.job_requests.MAX_ATTEMPTS_LIMIT).
MAX_ATTEMPTS_LIMIT = 100
OPTION_KEYS = {"MAX_ATTEMPTS"}
CANCELLED_ERROR_CLASS = "queue_app.exceptions.JobCancelled"
EXPIRED_ERROR_CLASS = "queue_app.exceptions.JobExpired"
UNKNOWN_ERROR_CLASS = "builtins.Exception"

# Import paths of the tasks validated in this process (each @task is, when its module loads).
_known_task_paths: set[str] = set()

_STATUS = {
    Status.WAITING: TaskResultStatus.READY,
    Status.QUEUED: TaskResultStatus.READY,
    Status.PROCESSING: TaskResultStatus.RUNNING,
    Status.CANCELLING: TaskResultStatus.RUNNING,
    Status.COMPLETED: TaskResultStatus.SUCCESSFUL,
    Status.FAILED: TaskResultStatus.FAILED,
    Status.CANCELLED: TaskResultStatus.FAILED,
    Status.EXPIRED: TaskResultStatus.FAILED,
}


class UnknownTask(InvalidTask):
    """A job's task cannot be loaded: its module was renamed or removed, or the path names
    something that is not a ``@task``. ``get_result`` raises it (naming the job and the path),
    and the worker fails such a job at once: no retry would find the task."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobQueueTask(Task):
    """A Task that may ask for retries: ``@task(max_attempts=3)`` (``@task`` passes extra
    keywords to the backend's ``task_class``). None uses the backend's OPTIONS.

    ``unique=True`` makes a call with the same task, queue and arguments return the job
    already queued or running instead of enqueuing another; ``unique_for`` (seconds) and
    ``unique_states`` (statuses) are the enqueue's ``unique_for`` and ``unique_states``.

    ``expires_in`` (seconds): a call not started that long after its enqueue never runs
    (its result reads FAILED, with a ``JobExpired`` error). ``concurrency_key``: the
    calls share their queue's per-key limits (a fixed key per task; a key per argument
    needs ``enqueue_job``).
    """

    max_attempts: int | None = None
    expires_in: float | None = None
    concurrency_key: str | None = None
    unique: bool = False
    unique_for: float | None = None
    unique_states: Sequence[str] | None = None


def _valid_attempts(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ATTEMPTS_LIMIT


class JobQueueBackend(BaseTaskBackend):
    task_class = JobQueueTask
    supports_defer = True
    supports_get_result = True
    supports_priority = True
    # An async task function runs through Task.call (async_to_sync) in the worker.
    supports_async_task = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Without QUEUES the alias serves every JOBQUEUE queue (Django's default is "default"
        # alone): a queue added to JOBQUEUE takes tasks at once.
        if "QUEUES" not in params:
            self._queues = None

    @property
    def queues(self) -> set[str]:
        """The queues this alias's tasks may name: TASKS' QUEUES, else every JOBQUEUE queue."""
        if self._queues is not None:
            return self._queues
        try:
            return set(queue_settings().QUEUES)
        except SettingError:
            return {DEFAULT_TASK_QUEUE_NAME}  # queue_app.E001 names the bad JOBQUEUE key

    @queues.setter
    def queues(self, names: set[str]) -> None:
        self._queues = names

    def max_attempts(self, task: Task) -> int:
        """The task's own ``max_attempts``, else the backend's OPTIONS, else one attempt."""
        own = getattr(task, "max_attempts", None)
        return own if own is not None else self.options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        # Refused here as Django's InvalidTask rather than by enqueue as InvalidJob: Django lets
        # 5.0 and True through as whole numbers, but the job's priority is an int.
        if not isinstance(task.priority, int) or isinstance(task.priority, bool):
            raise InvalidTask(f"priority must be an int, not {type(task.priority).__name__}.")
        run_after = task.run_after
        if run_after is not None and timezone.is_aware(run_after) and run_after > LATEST_EXACT_TIME:
            raise InvalidTask(
                f"run_after must not be later than {LATEST_EXACT_TIME.isoformat()}"
                " (the queue's order ends there)."
            )
        try:
            queues = queue_settings().QUEUES
        except SettingError:
            # @task runs this at import, before the system checks: leave a bad JOBQUEUE
            # to the queue_app.E001 check, which stops the command naming the key.
            return
        if task.queue_name not in queues:
            raise InvalidTask(f"Queue '{task.queue_name}' is not a configured JOBQUEUE queue.")
        if not _valid_attempts(self.max_attempts(task)):
            raise InvalidTask(f"max_attempts must be a whole number between 1 and {MAX_ATTEMPTS_LIMIT}.")
        _check_unique_options(task)
        _check_job_options(task)
        _known_task_paths.add(task.module_path)

    def check(self, **kwargs) -> list[checks.CheckMessage]:
        if not apps.is_installed("queue_app"):
            return [
                checks.Error(
                    f"TASKS['{self.alias}'] uses {type(self).__name__},"
                    " which needs queue_app in INSTALLED_APPS.",
                    id="queue_app.E101",
                )
            ]
        errors = []
        try:
            served = queue_settings().QUEUES
        except SettingError:
            return []  # queue_app.E001 names the bad JOBQUEUE key; nothing to compare against
        for name in sorted(self.queues - set(served)):
            errors.append(
                checks.Error(
                    f"TASKS['{self.alias}']['QUEUES'] names {name!r}, which JOBQUEUE['QUEUES'] does not serve"
                    f" (served: {', '.join(served)}).",
                    id="queue_app.E102",
                )
            )
        unknown = set(self.options) - OPTION_KEYS
        if unknown:
            errors.append(
                checks.Error(
                    f"TASKS['{self.alias}']['OPTIONS']: unknown key(s) {', '.join(sorted(unknown))}.",
                    id="queue_app.E103",
                )
            )
        if "MAX_ATTEMPTS" in self.options and not _valid_attempts(self.options["MAX_ATTEMPTS"]):
            errors.append(
                checks.Error(
                    f"TASKS['{self.alias}']['OPTIONS']['MAX_ATTEMPTS'] must be a whole number"
                    f" between 1 and {MAX_ATTEMPTS_LIMIT}.",
                    id="queue_app.E104",
                )
            )
        return errors

    def enqueue(self, task: Task, args, kwargs) -> TaskResult:
        from queue_app.services import enqueue_job

        self.validate_task(task)
        payload = {
            "task": task.module_path,
            "args": normalize_json(args),
            "kwargs": normalize_json(kwargs),
            # What get_result() rebuilds the Task from.
            "priority": task.priority,
            "run_after": task.run_after.isoformat() if task.run_after else None,
        }
        unique = getattr(task, "unique", False)
        job = enqueue_job(
            TASK_JOB_TYPE,
            payload,
            # The full integer: Redis orders by it (-100..100, higher first).
            priority=task.priority,
            queue=task.queue_name,
            run_at=task.run_after,
            max_attempts=self.max_attempts(task),
            unique_key=self._unique_key(task, payload) if unique else None,
            unique_for=task.unique_for if unique else None,
            unique_states=task.unique_states if unique else None,
            expires_in=getattr(task, "expires_in", None),
            concurrency_key=getattr(task, "concurrency_key", None),
            backend=self.alias,
        )
        if not job.was_created:
            # A unique task's job already queued or running: nothing was enqueued.
            return self._result(job, _task_of(job))
        result = self._result(job, task, worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def _unique_key(self, task: Task, payload: dict[str, Any]) -> str:
        """The same task, on the same queue and backend, with the same arguments."""
        call = [self.alias, task.module_path, task.queue_name, payload["args"], payload["kwargs"]]
        digest = hashlib.sha256(json.dumps(call, sort_keys=True).encode()).hexdigest()
        return f"django.task:{digest}"

    def get_result(self, result_id: str) -> TaskResult:
        from queue_app.engine.selectors import valid_ids
        from queue_app.models import Job

        ids = valid_ids([result_id])
        job = Job.objects.filter(id=ids[0], type=TASK_JOB_TYPE, backend=self.alias).first() if ids else None
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result(job, _task_of(job))

    def _result(self, job, task: Task, *, worker_ids: list[str] | None = None) -> TaskResult:
        status = _STATUS[job.status]
        finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
        result = TaskResult(
            task=task,
            id=str(job.id),
            status=status,
            # When enqueue() ran: the job's creation, never moved by a schedule or retry.
            enqueued_at=job.created_at,
            started_at=job.started_at,
            last_attempted_at=job.started_at,
            finished_at=job.completed_at if finished else None,
            args=job.payload["args"],
            kwargs=job.payload["kwargs"],
            backend=self.alias,
            errors=_errors(job),
            worker_ids=_worker_ids(job) if worker_ids is None else worker_ids,
        )
        successful = status == TaskResultStatus.SUCCESSFUL
        object.__setattr__(result, "_return_value", job.result if successful else None)
        return result


def _check_unique_options(task: Task) -> None:
    """The enqueue's own rules for unique_for and unique_states, as Django's InvalidTask."""
    from queue_app.engine.uniqueness import checked_uniqueness

    unique_for = getattr(task, "unique_for", None)
    unique_states = getattr(task, "unique_states", None)
    if not getattr(task, "unique", False):
        if unique_for is not None or unique_states is not None:
            raise InvalidTask("unique_for and unique_states need unique=True.")
        return
    try:
        checked_uniqueness("-", unique_for, unique_states)
    except InvalidJob as exc:
        raise InvalidTask(f"{exc.field} {exc.message}.") from None


def _check_job_options(task: Task) -> None:
    """The enqueue's own rules for expires_in and concurrency_key, as Django's InvalidTask."""
    from queue_app.engine.job_requests import JobRequest, check_job_options

    try:
        check_job_options(
            JobRequest(
                type=TASK_JOB_TYPE,
                expires_in=getattr(task, "expires_in", None),
                concurrency_key=getattr(task, "concurrency_key", None),
            )
        )
    except InvalidJob as exc:
        raise InvalidTask(f"{exc.field} {exc.message}.") from None


def known_task_paths() -> set[str]:
    """The tasks this process knows of, for choices that must not scan the job table."""
    return set(_known_task_paths)


def _errors(job) -> list[TaskError]:
    """Only a finished failure carries its error: between attempts a job reads READY, cleanly."""
    if job.status == Status.CANCELLED:
        return [TaskError(exception_class_path=CANCELLED_ERROR_CLASS, traceback="JobCancelled: cancelled\n")]
    if job.status == Status.EXPIRED:
        return [TaskError(exception_class_path=EXPIRED_ERROR_CLASS, traceback="JobExpired: expired\n")]
    if job.status != Status.FAILED:
        return []
    # Jobs failed before the traceback had its own column kept it in last_error.
    traceback = job.last_error_traceback or job.last_error
    # Never an empty path, which TaskError.exception_class cannot import: a failure recorded
    # without its class (before every path named one) reads as a plain Exception.
    return [TaskError(exception_class_path=job.last_error_class or UNKNOWN_ERROR_CLASS, traceback=traceback)]


def _worker_ids(job) -> list[str]:
    """One entry per attempt, from the claim rows of the job's log (so retries keep every worker)."""
    from queue_app.models import JobLog

    if job.attempts == 0:
        return []
    events = ("claimed", "handed_back", "snoozed")
    rows = JobLog.objects.filter(job_id=job.id, event__in=events).order_by("created_at", "id")
    rows = list(rows.values_list("event", "extra"))
    # A handed-back or snoozed attempt is not counted (attempts went down): drop its claim,
    # which records the same fence as the hand-back or snooze.
    uncounted = {extra.get("fence") for event, extra in rows if event != "claimed"} - {None}
    claims = [extra for event, extra in rows if event == "claimed" and extra.get("fence") not in uncounted]
    # Rows without a fence (none are written now) fall back to the latest claims.
    return [extra.get("worker", "") for extra in claims][-job.attempts :]


def _task_of(job) -> Task:
    """The Task as it was enqueued: its priority, queue, run_after and backend alias."""
    task = _load_task(job.payload["task"], job.id)
    run_after = job.payload.get("run_after")
    return task.using(
        priority=job.payload.get("priority", task.priority),
        queue_name=job.queue,
        run_after=parse_datetime(run_after) if run_after else None,
        backend=job.backend or task.backend,
    )


def _load_task(module_path: str, job_id) -> Task:
    """Only objects made by ``@task`` run: a module path naming anything else is refused."""
    try:
        task = import_string(module_path)
    except ImportError as exc:
        raise UnknownTask(f"Task of job {job_id}: {module_path} cannot be imported ({exc})") from None
    if not isinstance(task, Task):
        raise UnknownTask(f"Task of job {job_id}: {module_path} is not a django.tasks Task")
    return task


@job_handler(TASK_JOB_TYPE, internal=True, give_up_on=(UnknownTask,))
def run_django_task(payload: dict[str, Any]) -> Any:
    """Run one attempt, sending task_started and (when the attempt is the last) task_finished.

    The signals fire in the worker, around the call; the completion is committed
    after task_finished, so a receiver reads the outcome from the task_result it is
    given rather than from get_result(). A task that cannot be loaded (UnknownTask) has
    no TaskResult to send: the job fails without them.
    """
    from queue_app.models import Job

    job = Job.objects.get(id=current_job().id)
    task = _task_of(job)
    backend = task.get_backend()
    result = backend._result(job, task)
    task_started.send(type(backend), task_result=result)
    args, kwargs = payload["args"], payload["kwargs"]
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = normalize_json(value)
        _check_storable(value)
    except (WorkerShutdown, Snooze):
        raise  # the worker hands the attempt back or snoozes it, uncounted: no outcome to announce
    except BaseException as exc:
        # Django's immediate backend fails a task on any BaseException but KeyboardInterrupt; the
        # worker counts that one too (a task's doing, not a signal), as its time limit and lost lease.
        if job.attempts >= job.max_attempts:
            _finish(result, TaskResultStatus.FAILED, error=exc)
            task_finished.send(type(backend), task_result=result)
        raise
    _finish(result, TaskResultStatus.SUCCESSFUL, value=value)
    task_finished.send(type(backend), task_result=result)
    return value


def _check_storable(value: Any) -> None:
    """Refuse here what the worker would refuse to store (NaN, a NUL, an integer beyond 64
    bits, a non-string key), before task_finished announces a success. Not JSON is a
    TypeError, as normalize_json raises; too large stays PayloadTooLarge."""
    try:
        check_result(value)
    except InvalidJob as exc:
        raise TypeError(f"Unsupported return value: {exc.message}") from None


def _finish(
    result: TaskResult, status: str, *, value: Any = None, error: BaseException | None = None
) -> None:
    """The outcome the worker is about to record, on the result the signal carries."""
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    if error is not None:
        cls = type(error)
        result.errors.append(
            TaskError(
                exception_class_path=f"{cls.__module__}.{cls.__qualname__}",
                traceback="".join(traceback.format_exception(error)),
            )
        )
