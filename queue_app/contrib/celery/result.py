"""``AsyncResult``: a task's state and outcome, read from its job row (no result backend);
``GroupResult``: a group's, in the group's order.

States: ``PENDING`` (queued, never run; also an id no job has, as in Celery),
``RETRY`` (queued again after a failed attempt), ``STARTED`` (running; Celery says
so only with ``track_started``), ``SUCCESS``, ``FAILURE``, ``REVOKED`` (cancelled,
or expired before it started). A failure's ``result`` is its exception rebuilt from
the class and message the worker recorded, as django.tasks' ``TaskError`` loads it.

A canvas step cancelled because a task before it failed reads REVOKED, and its ``get()``
raises what that task raised, as Celery's ``get()`` re-raises a parent's error.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from queue_app.contrib.celery import states
from queue_app.contrib.celery.exceptions import TaskError, TaskRevokedError, TimeoutError

if TYPE_CHECKING:
    from queue_app.contrib.celery.app import Celery

_COLUMNS = (
    "id",
    "type",
    "status",
    "attempts",
    "result",
    "last_error",
    "last_error_class",
    "last_error_traceback",
    "completed_at",
)
_REVOKED_CLASS = f"{TaskRevokedError.__module__}.{TaskRevokedError.__qualname__}"
_DEPENDENCY_FAILED_CLASS = "queue_app.exceptions.DependencyFailed"


class AsyncResult:
    def __init__(
        self,
        id: str,
        app: Celery | None = None,
        parent: AsyncResult | GroupResult | None = None,
        **ignored: Any,
    ) -> None:
        self.id = str(id)
        self.app = app
        # In a chain, the result of the task (or group) before this one.
        self.parent = parent

    @property
    def task_id(self) -> str:
        return self.id

    def _job(self) -> dict[str, Any] | None:
        from queue_app.engine.selectors import valid_ids
        from queue_app.models import Job

        ids = valid_ids([self.id])
        return Job.objects.filter(id=ids[0]).values(*_COLUMNS).first() if ids else None

    @property
    def state(self) -> str:
        return _state(self._job())

    status = state

    @property
    def result(self) -> Any:
        """The return value once SUCCESS; the exception once FAILURE, REVOKED or RETRY."""
        return _outcome(self._job())

    info = result

    @property
    def traceback(self) -> str | None:
        job = self._job()
        if job is None or _state(job) not in states.EXCEPTION_STATES:
            return None
        return job["last_error_traceback"] or job["last_error"] or None

    @property
    def name(self) -> str | None:
        job = self._job()
        return job["type"] if job else None

    @property
    def date_done(self):
        job = self._job()
        return job["completed_at"] if job and _state(job) in states.READY_STATES else None

    def ready(self) -> bool:
        return self.state in states.READY_STATES

    def successful(self) -> bool:
        return self.state == states.SUCCESS

    def failed(self) -> bool:
        return self.state == states.FAILURE

    def get(
        self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5, **ignored: Any
    ):
        """Wait until the task is ready; its return value, or (``propagate``) its exception
        raised. TimeoutError after ``timeout`` seconds not ready."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self._job()
            state = _state(job)
            if state in states.READY_STATES:
                outcome = _outcome(job)
                if propagate and state in states.PROPAGATE_STATES:
                    raise outcome
                return outcome
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("The operation timed out.")
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))

    wait = get

    def revoke(self, terminate: bool = False, signal: Any = None, **ignored: Any) -> None:
        """Cancel the job (a running one is stopped by its worker, whatever ``terminate``);
        nothing happens to a finished one, as in Celery."""
        from queue_app.exceptions import JobNotFound, TransitionNotAllowed
        from queue_app.services import cancel_job

        try:
            cancel_job(self.id)
        except (JobNotFound, TransitionNotAllowed):
            pass

    def forget(self) -> None:
        """Nothing to forget early: the job is the queue's record, removed by ``prune_jobs``."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return other.id == self.id
        return other == self.id if isinstance(other, str) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.id)

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"


class GroupResult:
    """The results of a group's tasks, in the group's order (a member may be a GroupResult
    itself: a chain in the group that ends in a group). ``id`` is the workflow's."""

    def __init__(
        self,
        id: str | None = None,
        results: list[AsyncResult | GroupResult] | None = None,
        parent: AsyncResult | GroupResult | None = None,
        app: Celery | None = None,
        **ignored: Any,
    ) -> None:
        self.id = None if id is None else str(id)
        self.results = list(results or [])
        self.parent = parent
        self.app = app

    @property
    def children(self) -> list[AsyncResult | GroupResult]:
        return self.results

    def get(
        self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5, **ignored: Any
    ) -> list[Any]:
        """Every member's outcome, in order, within ``timeout`` seconds in all; with
        ``propagate``, the first failed member's exception (in group order) is raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        outcomes = []
        for result in self.results:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            outcomes.append(result.get(timeout=left, propagate=propagate, interval=interval))
        return outcomes

    join = get

    def ready(self) -> bool:
        return all(result.ready() for result in self.results)

    def successful(self) -> bool:
        return all(result.successful() for result in self.results)

    def failed(self) -> bool:
        return any(result.failed() for result in self.results)

    def waiting(self) -> bool:
        return not self.ready()

    def completed_count(self) -> int:
        return sum(result.successful() for result in self.results)

    def revoke(self, terminate: bool = False, signal: Any = None, **ignored: Any) -> None:
        for result in self.results:
            result.revoke(terminate=terminate, signal=signal)

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> AsyncResult | GroupResult:
        return self.results[index]

    def __repr__(self) -> str:
        return f"<GroupResult: {self.id} [{', '.join(str(result) for result in self.results)}]>"

    def __str__(self) -> str:
        return str(self.id)


def _state(job: dict[str, Any] | None) -> str:
    if job is None:
        return states.PENDING
    status = job["status"]
    if status == "queued":
        return states.RETRY if job["attempts"] else states.PENDING
    if status == "completed":
        return states.SUCCESS
    if status == "failed":
        return states.REVOKED if job["last_error_class"] == _REVOKED_CLASS else states.FAILURE
    if status in ("cancelled", "expired"):
        return states.REVOKED
    # processing, and a job on its way to a state (cancelling) or waiting for others.
    return states.STARTED if status != "waiting" else states.PENDING


def _outcome(job: dict[str, Any] | None) -> Any:
    state = _state(job)
    if state == states.SUCCESS:
        return job["result"]
    if state == states.REVOKED and job["last_error_class"] == _DEPENDENCY_FAILED_CLASS:
        culprit = _culprit(job)
        if culprit is not None and culprit["last_error_class"] != _DEPENDENCY_FAILED_CLASS:
            return _outcome(culprit)
    if state == states.REVOKED:
        return TaskRevokedError(_message(job["last_error"], _REVOKED_CLASS) or job["status"])
    if state in (states.FAILURE, states.RETRY):
        return _exception(job["last_error_class"], job["last_error"])
    return None


def _culprit(job: dict[str, Any]) -> dict[str, Any] | None:
    """The job whose failure (or cancel) cancelled ``job`` and the steps after it, first of all."""
    from queue_app.models import Job, JobWait

    seen = {job["id"]}
    while job is not None and job["last_error_class"] == _DEPENDENCY_FAILED_CLASS:
        blocked_by = JobWait.objects.filter(job_id=job["id"]).values_list("blocked_by", flat=True).first()
        if blocked_by is None or blocked_by in seen:
            break  # retried meanwhile: the job itself is all there is to tell
        seen.add(blocked_by)
        job = Job.objects.filter(id=blocked_by).values(*_COLUMNS).first()
    return job


def _message(summary: str, class_path: str) -> str:
    """The message of an 'ExceptionType: message' summary (or of a traceback's last line)."""
    if summary.startswith("Traceback (most recent call last)"):
        summary = next((line for line in reversed(summary.splitlines()) if line.strip()), "")
    name = class_path.rpartition(".")[2]
    for prefix in (f"{class_path}: ", f"{name}: "):
        if summary.startswith(prefix):
            return summary[len(prefix) :]
    return "" if summary in (name, class_path) else summary


def _exception(class_path: str, summary: str) -> BaseException:
    """The recorded exception, rebuilt with its message; a TaskError when its class cannot
    be imported or built from one message."""
    message = _message(summary, class_path)
    try:
        cls = import_string(class_path) if class_path else None
    except ImportError:
        cls = None
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            return cls(message) if message else cls()
        except Exception:  # noqa: BLE001 - a class that needs other arguments
            pass
    return TaskError(summary)
