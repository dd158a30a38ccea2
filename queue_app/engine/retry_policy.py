"""Whether a failed attempt runs again, and when: the one place that decides.

Every failure goes through here: an exception a handler raised (the worker
asks ``failure_policy``), and an attempt that ended without one reaching the
worker (time limit kill, dead worker, expired lease: ``backoff_delay`` with no
exception). Whether attempts are left is the job row's business, checked by
the transition that schedules the retry.

Backoffs, with ``base`` and ``cap`` from the handler, else the JOBQUEUE settings:

- ``"exponential"`` (default): uniform in ``[0, min(cap, base * 2**(attempt-1))]``,
  "full jitter": retries of many jobs that failed together (a dependency went
  down) spread over the whole window instead of arriving in waves;
- ``"linear"``: ``min(cap, base * attempt)``; ``"fixed"``: ``min(cap, base)``;
- a function ``(attempt, exception or None) -> seconds``.
"""

from __future__ import annotations

import math
import random

from queue_app.conf import queue_settings
from queue_app.exceptions import RETRY_AFTER_MAX_SECONDS, RetryAfter
from queue_app.handlers import HandlerSpec
from queue_app.observability.logs import get_logger

log = get_logger(__name__)


def exponential_delay(attempt: int, *, base: float, cap: float) -> float:
    """Full jitter: uniform in [0, d], d = min(cap, base * 2**(attempt-1))."""
    # The exponent bounded: past 2**64 every delay is the cap, and a float would overflow at 2**1024.
    return full_jitter(min(cap, base * 2 ** min(max(attempt - 1, 0), 64)))


def full_jitter(delay: float) -> float:
    return random.uniform(0, delay)


def backoff_delay(spec: HandlerSpec | None, attempt: int, exc: BaseException | None = None) -> float:
    """Seconds before the retry of failed attempt number ``attempt`` (1 for the first)."""
    settings = queue_settings()
    base = (spec and spec.retry_backoff_base) or settings.RETRY_BACKOFF_BASE_SECONDS
    cap = (spec and spec.retry_backoff_max) or settings.RETRY_BACKOFF_MAX_SECONDS
    backoff = spec.backoff if spec is not None else "exponential"
    if callable(backoff):
        delay = _own_delay(spec, backoff, attempt, exc)
        if delay is not None:
            return delay
        backoff = "exponential"
    if backoff == "fixed":
        return min(cap, base)
    if backoff == "linear":
        return min(cap, base * max(attempt, 1))
    return exponential_delay(attempt, base=base, cap=cap)


def _own_delay(spec: HandlerSpec, backoff, attempt: int, exc: BaseException | None) -> float | None:
    """A handler's backoff function's answer, or None when it raised or gave no usable delay:
    the failure must still be written, so the default backoff stands in (and a log line says so)."""
    try:
        delay = backoff(attempt, exc)
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise TypeError(f"returned {type(delay).__name__}, not a number of seconds")
        if not math.isfinite(delay) or not 0 <= delay <= RETRY_AFTER_MAX_SECONDS:
            raise ValueError(f"returned {delay}, not from 0 to {RETRY_AFTER_MAX_SECONDS} seconds")
    except Exception as error:  # noqa: BLE001 - any fault of the function falls back
        log.error("backoff_function_failed", type=spec.name, attempt=attempt, error=repr(error)[:300])
        return None
    return float(delay)


def failure_policy(
    spec: HandlerSpec | None, exc: BaseException | None, attempt: int
) -> tuple[bool, float | None]:
    """(retry?, seconds to wait) for attempt ``attempt`` that failed with ``exc``.

    ``RetryAfter`` decides alone: retried after its seconds. Otherwise an exception in
    ``give_up_on``, or outside ``retry_on`` when the handler names one, is not retried
    (delay None); any other is, after the handler's backoff. Either way the job fails
    when no attempt is left.
    """
    if isinstance(exc, RetryAfter):
        return True, exc.seconds
    if spec is not None and exc is not None:
        if isinstance(exc, spec.give_up_on):
            return False, None
        if spec.retry_on is not None and not isinstance(exc, spec.retry_on):
            return False, None
    return True, backoff_delay(spec, attempt, exc)
