"""A Celery task as a job handler: Celery's options, calls and ``self.request`` on the queue.

Each task registers an internal job type named like Celery's task (``module.function``
unless ``name=`` says otherwise), whose payload is ``{"args": [...], "kwargs": {...}}``
as JSON. Its Celery options become the handler's: ``max_retries`` the job's attempts,
``autoretry_for`` its ``retry_on``, ``retry_backoff`` / ``default_retry_delay`` its
backoff, ``soft_time_limit`` / ``time_limit`` its time limit. ``self.retry()`` raises
the queue's RetryAfter, so the failed attempt runs again after its countdown.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.json import normalize_json

from queue_app.contrib.celery.exceptions import MaxRetriesExceededError, Retry, TaskRevokedError
from queue_app.engine.retry_policy import exponential_delay
from queue_app.handlers import current_job, job_handler

if TYPE_CHECKING:
    from queue_app.contrib.celery.app import Celery
    from queue_app.contrib.celery.canvas import Signature
    from queue_app.contrib.celery.result import AsyncResult
    from queue_app.services import JobRequest

# Options Celery accepts that change nothing here: results are always kept (JSON), claims
# are leases (a dead worker's job runs again, as acks_late + reject_on_worker_lost), and a
# task that is running reads STARTED anyway.
IGNORED_OPTIONS = frozenset(
    {
        "acks_late",
        "acks_on_failure_or_timeout",
        "backend",
        "compression",
        "ignore_result",
        "reject_on_worker_lost",
        "resultrepr_maxsize",
        "send_events",
        "shared",
        "store_errors_even_if_ignored",
        "throws",
        "track_started",
        "trail",
        "typing",
    }
)
# Options whose meaning the queue does not give (yet): refused, rather than silently changed.
UNSUPPORTED_OPTIONS = {
    "rate_limit": "rate limits are per queue here: set_queue_limits(queue, rate_limit=jobs per second)",
    "lazy": "tasks register when their module is imported",
}
TASK_OPTIONS = frozenset(
    {
        "name",
        "bind",
        "base",
        "queue",
        "priority",
        "max_retries",
        "default_retry_delay",
        "autoretry_for",
        "dont_autoretry_for",
        "retry_kwargs",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "time_limit",
        "soft_time_limit",
        "expires",
        "serializer",
    }
)
# Celery's hooks that its worker calls around a run; this worker does not.
HOOKS = ("before_start", "on_success", "on_failure", "on_retry", "after_return")

# The engine's bound (queue_app.engine.job_requests.MAX_ATTEMPTS_LIMIT), not imported from there:
# a project's celery.py imports this module while Django loads its settings, before models.
MAX_ATTEMPTS_LIMIT = 100

# Every task of this process by name, whichever app (or none) made it.
_tasks: dict[str, Task] = {}


@dataclass(frozen=True)
class Request:
    """``self.request`` of a running task (Celery's ``Context``): the job it runs for."""

    id: str | None = None
    # Attempts that failed before this one (a timed-out or killed one counts too).
    retries: int = 0
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    task: str = ""
    eta: str | None = None
    expires: str | None = None
    delivery_info: dict[str, Any] = field(default_factory=dict)
    hostname: str | None = None
    called_directly: bool = True
    is_eager: bool = False


_request: ContextVar[Request] = ContextVar("celery_request")


@dataclass(frozen=True)
class CeleryBackoff:
    """The wait before an automatic retry, as Celery's ``autoretry_for`` computes it:
    ``countdown`` (``retry_kwargs``, else ``default_retry_delay``), or with ``retry_backoff``
    ``factor * 2**retries`` capped at ``maximum``, drawn from [0, that] with ``retry_jitter``."""

    countdown: float
    factor: float | None = None
    maximum: float = 600
    jitter: bool = True

    def __call__(self, attempt: int, exc: BaseException | None) -> float:
        if self.factor is None:
            return self.countdown
        if self.jitter:
            return exponential_delay(attempt, base=self.factor, cap=self.maximum)
        return min(self.maximum, self.factor * 2 ** min(max(attempt - 1, 0), 64))


class Task:
    """A task made by ``@shared_task`` / ``@app.task``; class attributes are Celery's defaults."""

    max_retries: int | None = 3
    default_retry_delay: float = 180
    queue: str | None = None
    priority: int | None = None
    autoretry_for: tuple[type[BaseException], ...] = ()
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    retry_kwargs: dict[str, Any] = {}  # never mutated, as in Celery
    retry_backoff: bool | float = False
    retry_backoff_max: float = 600
    retry_jitter: bool = True
    time_limit: float | None = None
    soft_time_limit: float | None = None
    expires: float | datetime | None = None
    serializer: str = "json"

    def __init__(self, func: Callable[..., Any], *, app: Celery | None = None, **options: Any) -> None:
        _check_task_options(options)
        self._app = app
        self.bind = bool(options.pop("bind", False))
        self.name = options.pop("name", None) or _default_name(func, app)
        for key, value in options.items():
            setattr(self, key, value)
        if self.serializer != "json":
            raise ValueError(f"task {self.name}: serializer {self.serializer!r}: payloads are JSON here")
        self._func = func
        self._signature = inspect.signature(func)
        functools.update_wrapper(self, func)
        self._register()

    @property
    def app(self) -> Celery | None:
        """The app that made it; for a shared task, the current app (the last one made)."""
        from queue_app.contrib.celery.app import current_app

        return self._app or current_app()

    # --- registration -----------------------------------------------------------------

    def _register(self) -> None:
        max_retries = self.retry_kwargs.get("max_retries", self.max_retries)
        if max_retries is not None and (
            isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0
        ):
            raise ValueError(f"task {self.name}: max_retries must be a whole number from 0, or None")
        self.max_retries = max_retries
        # Celery's None (retry for ever) becomes the most attempts a job may have.
        attempts = MAX_ATTEMPTS_LIMIT if max_retries is None else min(max_retries + 1, MAX_ATTEMPTS_LIMIT)
        factor = self.retry_backoff
        backoff = CeleryBackoff(
            countdown=float(self.retry_kwargs.get("countdown", self.default_retry_delay)),
            factor=None if not factor else (1.0 if factor is True else float(factor)),
            maximum=float(self.retry_backoff_max),
            jitter=bool(self.retry_jitter),
        )
        job_handler(
            self.name,
            time_limit=self.soft_time_limit or self.time_limit,
            max_attempts=attempts,
            # Celery retries only what autoretry_for names (and self.retry()); the rest fail.
            retry_on=tuple(self.autoretry_for),
            give_up_on=(*self.dont_autoretry_for, MaxRetriesExceededError, TaskRevokedError),
            backoff=backoff,
            internal=True,
        )(self._handle)
        _tasks[self.name] = self

    def _handle(self, payload: dict[str, Any]) -> Any:
        """One attempt, in the worker: refuse it once expired, else run with its request set."""
        job = current_job()
        expires = payload.get("expires")
        if expires is not None and timezone.now() >= datetime.fromisoformat(expires):
            raise TaskRevokedError(f"expired at {expires}")
        args, kwargs = tuple(payload.get("args", ())), dict(payload.get("kwargs", {}))
        if "parents" in payload:
            # A step of a canvas: its parents' results come first, as Celery's partials take them.
            results = list(job.parent_results().values())
            args = (_arranged(payload["parents"], results), *args)
        request = Request(
            id=job.id,
            retries=job.attempt - 1,
            args=args,
            kwargs=kwargs,
            task=self.name,
            expires=expires,
            delivery_info={"routing_key": job.queue},
            called_directly=False,
        )
        token = _request.set(request)
        try:
            return normalize_json(self.run(*args, **kwargs))
        finally:
            _request.reset(token)

    # --- what task code calls -----------------------------------------------------------

    @property
    def run(self) -> Callable[..., Any]:
        """The task's function (given the task first when ``bind=True``)."""
        return functools.partial(self._func, self) if self.bind else self._func

    @property
    def request(self) -> Request:
        """The running attempt's request; a direct call's is ``called_directly``."""
        return _request.get(Request(task=self.name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run in this process, now, as Celery does for ``add(2, 2)``."""
        token = _request.set(Request(task=self.name, args=args, kwargs=kwargs))
        try:
            return self.run(*args, **kwargs)
        finally:
            _request.reset(token)

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: tuple | list | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult:
        """Enqueue a job for this task, in the caller's transaction (rolled back, it never existed)."""
        from queue_app.contrib.celery.result import AsyncResult
        from queue_app.services import enqueue_job

        if "parents" in options:  # for canvas steps only
            raise TypeError("apply_async() got an unexpected option 'parents'")
        request = self.job_request(args, kwargs, **options)
        job = enqueue_job(
            request.type,
            request.payload,
            priority=request.priority,
            queue=request.queue,
            run_at=request.run_at,
        )
        return AsyncResult(str(job.id), app=self.app)

    def job_request(
        self,
        args: tuple | list | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        countdown: float | None = None,
        eta: datetime | None = None,
        expires: float | datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
        parents: int | list | None = None,
        **options: Any,
    ) -> JobRequest:
        """The job a call with these arguments and options enqueues, checked before anything is
        written. ``parents`` (a canvas step, canvas.py): which of its parents' results the task
        takes as its first argument, by position, nested as the canvas nests them."""
        from queue_app.services import JobRequest

        _check_call_options(options)
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        # Celery's typing check: a call its function cannot take fails here, not in the worker.
        # Celery checks a chained task when the task before it sends it, so a task that takes
        # its parents' results is checked by its run, as there (a chain past a failing task
        # never gets that far).
        if parents is None:
            self._signature.bind(*((self,) if self.bind else ()), *args, **kwargs)
        now = timezone.now()
        payload: dict[str, Any] = {"args": normalize_json(list(args)), "kwargs": normalize_json(kwargs)}
        if parents is not None:
            payload["parents"] = parents
        expires = self.expires if expires is None else expires
        if expires is not None:
            payload["expires"] = _moment(expires, now, "expires").isoformat()
        if self.app is not None and self.app.conf.get("task_always_eager"):
            raise NotImplementedError(
                "task_always_eager: tasks run in a worker; call the task directly instead"
            )
        return JobRequest(
            type=self.name,
            payload=payload,
            # Celery's "no priority" is the queue's middle one (0, "medium").
            priority=next((value for value in (priority, self.priority) if value is not None), 0),
            queue=queue or self.queue or _default_queue(self.app),
            # Celery's countdown wins over eta when both are given.
            run_at=_moment(countdown, now, "countdown") if countdown is not None else _start(eta),
        )

    def retry(
        self,
        args: tuple | None = None,
        kwargs: dict[str, Any] | None = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Raise ``Retry`` (the queue's RetryAfter): this attempt runs again after ``countdown``
        seconds (``eta``, else ``default_retry_delay``). With no retry left, raise ``exc``, else
        MaxRetriesExceededError, as Celery does. The attempt's arguments are the job's: other
        ``args`` / ``kwargs`` for the retry are refused."""
        request = self.request
        if args is not None or kwargs is not None or options:
            raise NotImplementedError(
                "retry() with other args, kwargs or options: the retry runs the job's own"
            )
        if not throw:
            raise NotImplementedError(
                "retry(throw=False): a retry ends the attempt here, so it always raises"
            )
        if request.called_directly:
            raise exc if exc is not None else Retry(0, message="Task can be retried")
        limit = self.max_retries if max_retries is None else max_retries
        if limit is not None and request.retries >= limit:
            if exc is not None:
                raise exc
            raise MaxRetriesExceededError(
                f"Can't retry {self.name}[{request.id}] args:{request.args} kwargs:{request.kwargs}"
            )
        if countdown is None and eta is not None:
            countdown = max(0.0, (_start(eta) - timezone.now()).total_seconds())
        if countdown is None:
            countdown = self.default_retry_delay
        # Without exc, the error being handled (if any) is what the job records as the cause.
        cause = exc if exc is not None else sys.exc_info()[1]
        raise Retry(countdown, exc=cause) from cause

    def AsyncResult(self, task_id: str) -> AsyncResult:  # noqa: N802 - Celery's name
        from queue_app.contrib.celery.result import AsyncResult

        return AsyncResult(task_id, app=self.app)

    # --- signatures (canvas.py) ----------------------------------------------------------

    def signature(self, args: tuple | None = None, kwargs: dict | None = None, **options: Any) -> Signature:
        from queue_app.contrib.celery.canvas import Signature

        return Signature(self, tuple(args or ()), dict(kwargs or {}), options)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        return self.signature(args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        return self.signature(args, kwargs, immutable=True)

    def map(self, it) -> Any:
        from queue_app.contrib.celery.canvas import xmap

        return xmap(self, it)

    def starmap(self, it) -> Any:
        from queue_app.contrib.celery.canvas import xstarmap

        return xstarmap(self, it)

    def chunks(self, it, n: int) -> Any:
        from queue_app.contrib.celery.canvas import chunks

        return chunks(self, it, n)

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("apply(): call the task directly to run it here, add(2, 2)")

    def __repr__(self) -> str:
        return f"<@task: {self.name}>"


def _check_task_options(options: dict[str, Any]) -> None:
    for key in sorted(options):
        if key in UNSUPPORTED_OPTIONS:
            raise NotImplementedError(f"task option {key}: {UNSUPPORTED_OPTIONS[key]}")
    unknown = sorted(set(options) - TASK_OPTIONS - IGNORED_OPTIONS)
    if unknown:
        raise TypeError(f"unknown task option(s): {', '.join(unknown)}")
    for key in IGNORED_OPTIONS & set(options):
        options.pop(key)


# apply_async options that change nothing here, and those refused.
IGNORED_CALL_OPTIONS = frozenset(
    {
        "serializer",
        "compression",
        "retry",
        "retry_policy",
        "headers",
        "ignore_result",
        "add_to_parent",
        "delivery_mode",
    }
)
UNSUPPORTED_CALL_OPTIONS = {
    "link": "chain the next task instead: (task.s(...) | callback.s()).apply_async()",
    "link_error": "a failed task cancels the tasks chained after it; handle the error in the task",
    "task_id": "the queue makes each job's id (time-ordered UUIDs)",
    "exchange": "routing is by queue name here: pass queue=",
    "routing_key": "routing is by queue name here: pass queue=",
    "time_limit": "time limits are per task here: @shared_task(time_limit=...)",
    "soft_time_limit": "time limits are per task here: @shared_task(soft_time_limit=...)",
    "shadow": "a job is listed under its task's name",
    "chain": "build the chain with chain() or |",
    "connection": "sending is a database write in the caller's transaction, over no broker connection",
    "producer": "sending is a database write in the caller's transaction, over no broker connection",
    "publisher": "sending is a database write in the caller's transaction, over no broker connection",
}


def _check_call_options(options: dict[str, Any]) -> None:
    for key in sorted(options):
        if key in UNSUPPORTED_CALL_OPTIONS:
            raise NotImplementedError(f"apply_async({key}=...): {UNSUPPORTED_CALL_OPTIONS[key]}")
        if key == "serializer" and options[key] != "json":
            raise ValueError(f"serializer {options[key]!r}: payloads are JSON here")
        if key not in IGNORED_CALL_OPTIONS:
            raise TypeError(f"apply_async() got an unexpected option {key!r}")


def _arranged(positions: int | list, results: list[Any]) -> Any:
    """The parents' results as the step takes them: one result, or a list (nested as groups nest)."""
    if isinstance(positions, list):
        return [_arranged(position, results) for position in positions]
    return results[positions]


def _default_name(func: Callable[..., Any], app: Celery | None) -> str:
    module = func.__module__
    if module == "__main__" and app is not None and app.main:
        module = app.main
    return f"{module}.{func.__name__}"


def _default_queue(app: Celery | None) -> str:
    if app is not None:
        return app.conf.get("task_default_queue") or "default"
    return "default"


def _aware(moment: datetime) -> datetime:
    """Celery reads a naive datetime in its timezone, UTC unless configured."""
    return moment.replace(tzinfo=UTC) if timezone.is_naive(moment) else moment


def _start(eta: datetime | None) -> datetime | None:
    if eta is None:
        return None
    if not isinstance(eta, datetime):
        raise TypeError(f"eta must be a datetime, not {type(eta).__name__}")
    return _aware(eta)


def _moment(value: float | datetime, now: datetime, option: str) -> datetime:
    """A number of seconds from now, or a datetime, as a moment (expires, countdown)."""
    if isinstance(value, datetime):
        return _aware(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{option} must be a number of seconds or a datetime, not {type(value).__name__}")
    return now + timedelta(seconds=value)


def task_from(func: Callable[..., Any], app: Celery | None, options: dict[str, Any]) -> Task:
    """The task for ``func``: of the ``base`` class when one is given (a Task subclass)."""
    base = options.get("base") or (app.task_cls if app is not None else Task)
    if not (isinstance(base, type) and issubclass(base, Task)):
        raise TypeError("base must be a subclass of queue_app.contrib.celery.Task")
    hooks = [hook for hook in HOOKS if getattr(base, hook, None) is not None]
    if hooks:
        raise NotImplementedError(
            f"{base.__name__} defines {', '.join(hooks)}: this worker does not call Celery's hooks"
        )
    options = {key: value for key, value in options.items() if key != "base"}
    return base(func, app=app, **options)


def task_decorator(app: Celery | None, args: tuple, options: dict[str, Any]):
    """``@shared_task``, ``@shared_task()`` and ``@shared_task(**options)`` (and ``app.task``)."""
    if len(args) == 1 and callable(args[0]) and not options:
        return task_from(args[0], app, {})
    if args:
        raise TypeError("task decorator takes options as keywords only")

    def decorate(func: Callable[..., Any]) -> Task:
        return task_from(func, app, dict(options))

    return decorate


def registered_task(name: str) -> Task:
    """The task ``name`` registered in this process; NotRegistered otherwise."""
    from queue_app.contrib.celery.exceptions import NotRegistered

    try:
        return _tasks[name]
    except KeyError:
        raise NotRegistered(name) from None


def registered_tasks() -> dict[str, Task]:
    return dict(_tasks)
