"""What a request to create a job is, and the checks it passes before anything is written.

The checks read nothing from the database: ``validate_jobs`` runs them alone, and
``enqueue_jobs`` (enqueue.py) runs them first, so a request that breaks a rule is
refused, with every job at fault named, before any statement is sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from queue_app import broker
from queue_app.conf import QueueSettings, queue_settings
from queue_app.engine.uniqueness import Uniqueness, checked_uniqueness
from queue_app.exceptions import InvalidJob, JobsRejected, QueueError
from queue_app.handlers import get_handler
from queue_app.payloads import check_json, checked_json_text
from queue_app.states import PRIORITY_MAX, PRIORITY_MIN, PRIORITY_VALUE, Priority, priority_tier

MAX_ATTEMPTS_LIMIT = 100
# A job may be scheduled up to the last time the ready set orders exactly.
LATEST_RUN_AT = broker.LATEST_EXACT_TIME


def check_run_at(run_at: datetime, *, field: str = "run_at") -> None:
    """Refuse a start beyond LATEST_RUN_AT; ``field`` names what the caller gave (run_at or a delay)."""
    if run_at > LATEST_RUN_AT:
        raise InvalidJob(
            f"must not start later than {LATEST_RUN_AT.isoformat()} (the queue's ordering ends there)",
            field=field,
        )


@dataclass
class JobRequest:
    """One job to create; validated by ``enqueue_jobs`` before anything is written."""

    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    # A named tier, or an integer from -100 to 100 (higher runs sooner).
    priority: str | int = Priority.MEDIUM
    queue: str = "default"
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    # The django.tasks backend alias enqueuing it, if any.
    backend: str = ""
    # The delay as asked for (run_at then holds the start it gave): a retry of the same
    # request, with the same delay, must match the first one's fingerprint.
    delay_seconds: float | None = None
    # No second job of this owner with this key while one is in unique_states (default:
    # states.DEFAULT_UNIQUE_STATES), created less than unique_for seconds ago (None: ever);
    # the enqueue returns that job instead. See queue_app/engine/uniqueness.py.
    unique_key: str | None = None
    unique_for: float | None = None
    unique_states: Sequence[str] | None = None
    # Not started by then, the job never runs (settled as expired). expires_in: seconds from
    # the enqueue, the same asked another way (give one of the two).
    expires_at: datetime | None = None
    expires_in: float | None = None
    # Jobs sharing a key share their queue's per-key limits (key_concurrency_limit, key_rate_limit).
    concurrency_key: str | None = None
    # Jobs this one waits for (engine/workflows.py): ids or Jobs of existing jobs (the
    # owner's), or JobRequests of the same call. It stays waiting until every one has
    # settled, then runs or is cancelled as ``on_failure`` says ("cancel": cancelled when
    # one failed or was cancelled; "continue": runs anyway).
    depends_on: Sequence[Any] = ()
    on_failure: str = "cancel"

    def fingerprint(self) -> str:
        """Same fingerprint = same request; another schedule is another request.

        An unscheduled request hashes what it did before schedules counted,
        so keys stored earlier still match their repeats.
        """
        body: list[Any] = [self.type, self.payload, self.priority, self.queue, self.max_attempts]
        if self.delay_seconds is not None:
            body.append({"delay_seconds": self.delay_seconds})
        elif self.run_at is not None:
            body.append({"run_at": self.run_at.astimezone(UTC).isoformat()})
        if self.unique_key is not None:
            states = None if self.unique_states is None else sorted(self.unique_states)
            body.append({"unique": [self.unique_key, self.unique_for, states]})
        if self.expires_in is not None:
            body.append({"expires_in": self.expires_in})
        elif self.expires_at is not None:
            body.append({"expires_at": self.expires_at.astimezone(UTC).isoformat()})
        if self.concurrency_key is not None:
            body.append({"concurrency_key": self.concurrency_key})
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


PRIORITY_RULE = (
    f"must be one of {', '.join(Priority.values)}, or an integer from {PRIORITY_MIN} to {PRIORITY_MAX}"
)


def resolved_priority(priority: object) -> tuple[str, int]:
    """(named tier, integer) of a priority given by name or by integer; InvalidJob names the field."""
    if isinstance(priority, int) and not isinstance(priority, bool):
        if PRIORITY_MIN <= priority <= PRIORITY_MAX:
            return priority_tier(priority), priority
    elif isinstance(priority, str) and priority in PRIORITY_VALUE:
        return str(priority), PRIORITY_VALUE[priority]
    raise InvalidJob(PRIORITY_RULE, field="priority")


@dataclass(slots=True)
class CheckedRequest:
    """A request with its defaults resolved, and its payload encoded once (to measure and to store)."""

    request: JobRequest
    payload_json: str
    max_attempts: int
    priority: str
    priority_value: int
    uniqueness: Uniqueness | None


def _checked(request: JobRequest, settings: QueueSettings) -> CheckedRequest:
    if not isinstance(request, JobRequest):
        raise InvalidJob(f"must be a JobRequest, not {type(request).__name__}")
    spec = get_handler(request.type)
    priority, priority_value = resolved_priority(request.priority)
    # Types first: a list or dict here would raise TypeError (unhashable) instead of naming the field.
    if not isinstance(request.queue, str) or request.queue not in settings.QUEUES:
        raise InvalidJob(f"must be one of {', '.join(settings.QUEUES)}", field="queue")
    if not isinstance(request.payload, dict):
        raise InvalidJob("must be a JSON object", field="payload")
    payload_json = checked_json_text(
        request.payload,
        field="payload",
        max_bytes=settings.MAX_PAYLOAD_BYTES,
        max_depth=settings.MAX_PAYLOAD_DEPTH,
    )
    max_attempts = request.max_attempts
    if max_attempts is None:
        max_attempts = spec.max_attempts or settings.DEFAULT_MAX_ATTEMPTS
    if (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidJob(f"must be an integer between 1 and {MAX_ATTEMPTS_LIMIT}", field="max_attempts")
    if request.run_at is not None:
        if not isinstance(request.run_at, datetime):
            raise InvalidJob("must be a datetime", field="run_at")
        if timezone.is_naive(request.run_at):
            raise InvalidJob("must include a UTC offset", field="run_at")
        check_run_at(request.run_at)
    key = request.idempotency_key
    if key is not None:
        if not isinstance(key, str) or not 1 <= len(key) <= 255:
            raise InvalidJob("must be 1 to 255 characters", field="idempotency_key")
        check_json(key, field="idempotency_key", max_bytes=1024, max_depth=1)
    uniqueness = checked_uniqueness(request.unique_key, request.unique_for, request.unique_states)
    check_job_options(request)
    return CheckedRequest(request, payload_json, max_attempts, priority, priority_value, uniqueness)


# The longest expiry a job may ask for, in seconds (about a hundred years).
MAX_EXPIRES_IN = 100 * 365 * 86400.0


def check_job_options(request: JobRequest) -> None:
    """Expiry (expires_at or expires_in) and concurrency_key; InvalidJob names the field."""
    if request.expires_at is not None and request.expires_in is not None:
        raise InvalidJob("give expires_at or expires_in, not both", field="expires_in")
    if request.expires_at is not None:
        if not isinstance(request.expires_at, datetime):
            raise InvalidJob("must be a datetime", field="expires_at")
        if timezone.is_naive(request.expires_at):
            raise InvalidJob("must include a UTC offset", field="expires_at")
    seconds = request.expires_in
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= MAX_EXPIRES_IN  # NaN fails too
    ):
        raise InvalidJob(
            f"must be a number of seconds above 0 and at most {MAX_EXPIRES_IN:g}", field="expires_in"
        )
    key = request.concurrency_key
    if key is not None:
        if not isinstance(key, str) or not 1 <= len(key) <= 255:
            raise InvalidJob("must be 1 to 255 characters", field="concurrency_key")
        check_json(key, field="concurrency_key", max_bytes=1024, max_depth=1)


def check_requests(requests: Sequence[JobRequest]) -> list[CheckedRequest]:
    settings = queue_settings()
    checked: list[CheckedRequest] = []
    errors: list[QueueError] = []
    first_use: dict[str, int] = {}
    for index, request in enumerate(requests):
        try:
            checked.append(_checked(request, settings))
        except QueueError as exc:
            exc.index = index
            errors.append(exc)
            continue
        key = request.idempotency_key
        if key is not None and key in first_use:
            message = f"same key as job {first_use[key]} of this request"
            errors.append(InvalidJob(message, field="idempotency_key", index=index))
        elif key is not None:
            first_use[key] = index
    if errors:
        raise JobsRejected(errors, total=len(requests))
    return checked


def validate_jobs(requests: Sequence[JobRequest]) -> list[JobRequest]:
    """The requests with their defaults resolved, or JobsRejected naming every job that breaks a rule.

    Reads nothing from the database, so it costs nothing to call before a
    write (``enqueue_jobs`` runs the same checks first).
    """
    return [replace(item.request, max_attempts=item.max_attempts) for item in check_requests(requests)]
