"""One base error; each subclass carries the HTTP status and code the API uses."""


class QueueError(Exception):
    status_code = 400
    code = "queue_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class UnknownJobType(QueueError):
    code = "unknown_type"


class InvalidJob(QueueError):
    code = "invalid"


class PayloadTooLarge(QueueError):
    status_code = 413
    code = "payload_too_large"


class JobNotFound(QueueError):
    status_code = 404
    code = "not_found"


class TransitionNotAllowed(QueueError):
    """The job's status does not allow this transition (e.g. cancel a finished job)."""

    status_code = 409
    code = "conflict"


class IdempotencyConflict(QueueError):
    """The key was used with a different request, or by another owner."""

    status_code = 422
    code = "idempotency_key_reused"


class JobTimeLimitExceeded(Exception):
    """Raised inside a handler when its soft time limit passes."""


class LeaseLost(Exception):
    """Raised inside a handler whose job was cancelled or rescued while it ran."""


class JobCancelled(Exception):
    """What a cancelled job reads as to django.tasks: a failure whose cause was a cancel."""


class WorkerShutdown(BaseException):
    """Raised inside a handler still running when the shutdown grace period ends."""


class IdempotencyKeyInUse(QueueError):
    """The key belongs to another owner's job; nothing about that job is revealed."""

    status_code = 409
    code = "idempotency_key_in_use"
