"""The registry that maps a job ``type`` to its Python callable and options.

Handlers register with ``@job_handler("name", ...)`` in a ``jobs`` module of
any installed app (discovered at start-up). A request can only name a
registered type: nothing from a request is ever imported or unpickled.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from queue_app.exceptions import JobTimeLimitExceeded, UnknownJobType

if TYPE_CHECKING:
    from queue_app.reports import CurrentJob

Handler = Callable[[dict[str, Any]], Any]
# A handler's own backoff: (attempt that failed, its exception or None) -> seconds to wait.
BackoffFunction = Callable[[int, BaseException | None], float]
# The named backoffs (queue_app/engine/retry_policy.py computes them).
BACKOFFS = ("exponential", "linear", "fixed")
ExceptionClasses = tuple[type[BaseException], ...]


@dataclass(frozen=True)
class HandlerSpec:
    name: str
    func: Handler
    # None means "use the JOBQUEUE default".
    time_limit: float | None = None
    max_attempts: int | None = None
    retry_backoff_base: float | None = None
    retry_backoff_max: float | None = None
    # Run the handler inside the transaction that completes the job: its own
    # database writes commit with the completion and roll back with a fenced
    # or failed attempt (exactly-once effects for database work).
    atomic: bool = False
    # Exceptions that fail the job at once instead of retrying (over retry_on).
    give_up_on: ExceptionClasses = ()
    # Only these exceptions are retried; None: every one not in give_up_on.
    retry_on: ExceptionClasses | None = None
    # How long a retry waits: one of BACKOFFS, or a BackoffFunction.
    backoff: str | BackoffFunction = "exponential"
    # Enqueued by code only (e.g. the django.tasks bridge), never by an API request.
    internal: bool = False
    # A sync handler that mostly waits (HTTP, mail): a worker with slots runs it on a thread.
    io_bound: bool = False

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    @property
    def runs_in_slot(self) -> bool:
        """Whether a worker with slots runs it beside others (async or io-bound)."""
        return self.is_async or self.io_bound


_registry: dict[str, HandlerSpec] = {}


def job_handler(
    name: str,
    *,
    time_limit: float | None = None,
    max_attempts: int | None = None,
    retry_backoff_base: float | None = None,
    retry_backoff_max: float | None = None,
    atomic: bool = False,
    give_up_on: ExceptionClasses = (),
    retry_on: ExceptionClasses | None = None,
    backoff: str | BackoffFunction = "exponential",
    internal: bool = False,
    io_bound: bool = False,
) -> Callable[[Handler], Handler]:
    """Register ``func`` (a function, or an ``async def`` coroutine function) as the
    handler of job type ``name``.

    A failed attempt is retried while attempts are left, unless its exception is in
    ``give_up_on`` or (when given) not in ``retry_on``; the wait is ``backoff``'s, or
    what a ``RetryAfter`` raised by the handler asks (queue_app/engine/retry_policy.py).
    """
    give_up_on = _exception_classes(name, "give_up_on", give_up_on)
    if retry_on is not None:
        retry_on = _exception_classes(name, "retry_on", retry_on)
    if not (callable(backoff) or backoff in BACKOFFS):
        raise ValueError(
            f"job type {name!r}: backoff must be one of {', '.join(BACKOFFS)} or a function"
            " (attempt, exception) -> seconds"
        )

    def register(func: Handler) -> Handler:
        if atomic and inspect.iscoroutinefunction(func):
            raise ValueError(f"job type {name!r}: atomic=True needs a sync handler (one transaction)")
        existing = _registry.get(name)
        if existing is not None and existing.func is not func:
            qualname = f"{existing.func.__module__}.{existing.func.__qualname__}"
            raise ValueError(f"job type {name!r} is already registered to {qualname}")
        _registry[name] = HandlerSpec(
            name=name,
            func=func,
            time_limit=time_limit,
            max_attempts=max_attempts,
            retry_backoff_base=retry_backoff_base,
            retry_backoff_max=retry_backoff_max,
            atomic=atomic,
            give_up_on=give_up_on,
            retry_on=retry_on,
            backoff=backoff,
            internal=internal,
            io_bound=io_bound,
        )
        return func

    return register


def _exception_classes(name: str, option: str, value: Any) -> ExceptionClasses:
    """A tuple of exception classes (one class alone is accepted), else ValueError naming the option."""
    classes = (value,) if isinstance(value, type) else value
    if not isinstance(classes, tuple | list) or not all(
        isinstance(cls, type) and issubclass(cls, BaseException) for cls in classes
    ):
        raise ValueError(f"job type {name!r}: {option} must be a tuple of exception classes")
    return tuple(classes)


def get_handler(name: str) -> HandlerSpec:
    try:
        return _registry[name]
    except (KeyError, TypeError):
        raise UnknownJobType(f"{name!r} is not a registered job type", field="type") from None


def registered_types(*, public: bool = False) -> list[str]:
    """All registered names, or only those an API request may name."""
    return sorted(name for name, spec in _registry.items() if not (public and spec.internal))


def registered_handlers() -> list[HandlerSpec]:
    return list(_registry.values())


# The job the current handler call runs for (id, attempt, ...), set by the worker.
_current_job: ContextVar = ContextVar("current_job")


def current_job() -> CurrentJob:
    """The job the current handler call runs: its id, attempt, fence and payload, and its
    ``progress()`` and ``log()`` (queue_app/reports.py). LookupError outside a handler."""
    from queue_app.reports import CurrentJob  # it reads the models; this module loads before them

    return CurrentJob(_current_job.get(), _current_attempt.get(None))


# The monotonic time the current handler call's soft time limit passes, set by the worker.
_soft_deadline: ContextVar[float] = ContextVar("soft_deadline")


# The attempt the current handler call runs (runtime.holdings.Attempt), set by the worker.
_current_attempt: ContextVar = ContextVar("current_attempt")


def check_time_limit() -> None:
    """Raise once the running attempt must stop: ``JobTimeLimitExceeded`` past its soft
    time limit, ``CancelRequested`` when its job was asked to cancel, ``LeaseLost`` when
    the job went to another attempt.

    A handler on a slot thread cannot be interrupted: calling this between steps is how
    it stops in time (the job stays cancelling until it returns; the supervisor kills
    the process at the hard limit). In the main thread and in coroutines the limit and
    the cancel interrupt by themselves; calling this is harmless.
    """
    attempt = _current_attempt.get(None)
    if attempt is not None and attempt.stop is not None:
        raise attempt.stop_error()
    deadline = _soft_deadline.get(None)
    if deadline is not None and time.monotonic() >= deadline:
        raise JobTimeLimitExceeded("time limit exceeded")
