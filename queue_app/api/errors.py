"""One exception handler: every error the API returns has the same JSON shape.

    {"code": "unknown_type", "detail": "type: 'x' is not a registered job type",
     "errors": {"type": ["'x' is not a registered job type"]}}

``errors`` names the fields at fault (absent when no field is); bulk
rejections add ``items``, one per job at fault. Domain errors carry a code
and a field; ``STATUS_BY_CODE`` gives each code its HTTP status. Database
errors caused by input that slipped past validation become 4xx, never 500.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404
from redis import RedisError
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import set_rollback

from queue_app.api.conflicts import is_transaction_conflict
from queue_app.api.parsers import RequestTooLarge
from queue_app.exceptions import JobsRejected, QueueError
from queue_app.observability.logs import get_logger

log = get_logger(__name__)

# The HTTP status of each domain error code; any other code is a 400.
STATUS_BY_CODE = {
    "invalid": 400,
    "unknown_type": 400,
    "not_found": 404,
    "unknown_queue": 404,
    "conflict": 409,
    "payload_too_large": 413,
    "idempotency_key_reused": 422,
}


def clean_text(value: str) -> str:
    """Escape lone surrogates (an echo of bad input) so the response can be encoded."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(key)): clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(item) for item in value]
    return value


def first_message(errors: Any, prefix: str = "") -> str:
    """'field: message' of the first error in a DRF-style error tree."""
    if isinstance(errors, dict):
        for key, item in errors.items():
            name = key if key == "non_field_errors" or not prefix else f"{prefix}.{key}"
            return first_message(item, name if key != "non_field_errors" else prefix)
    if isinstance(errors, list):
        for item in errors:
            if item:
                return first_message(item, prefix)
    text = str(errors)
    return f"{prefix}: {text}" if prefix else text


def error_body(code: str, detail: str, errors: Any = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "detail": detail}
    if errors:
        body["errors"] = errors
    body.update(extra)
    return clean(body)


def status_for(exc: QueueError) -> int:
    """A rejected bulk takes the most specific status among its jobs (e.g. 413 over 400)."""
    if isinstance(exc, JobsRejected):
        return max(status_for(error) for error in exc.errors)
    return STATUS_BY_CODE.get(exc.code, 400)


def item_error(index: int, status_code: int, code: str, errors: Any) -> dict[str, Any]:
    """One job of a rejected bulk, with its status (which the response drops, keeping the highest)."""
    return {
        "index": index,
        "status": status_code,
        "code": code,
        "detail": first_message(errors),
        "errors": errors,
    }


def queue_item_error(exc: QueueError, index: int | None = None) -> dict[str, Any]:
    field = exc.field or "non_field_errors"
    return item_error(
        exc.index if index is None else index, status_for(exc), exc.code, {field: [exc.message]}
    )


class BulkRejected(exceptions.APIException):
    """Some jobs of a bulk request are invalid: none was created."""

    default_code = "jobs_rejected"

    def __init__(self, items: list[dict[str, Any]], total: int) -> None:
        self.items = sorted(items, key=lambda item: item["index"])
        self.status_code = max(item.pop("status") for item in self.items)
        super().__init__(f"Rejected {len(items)} of {total} jobs; none was created.")


def queue_error_body(exc: QueueError) -> dict[str, Any]:
    if exc.field:
        return error_body(exc.code, f"{exc.field}: {exc.message}", {exc.field: [exc.message]})
    return error_body(exc.code, exc.message)


def _validation_body(exc: exceptions.ValidationError) -> dict[str, Any]:
    errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
    return error_body("invalid", first_message(errors) or "Invalid input.", errors)


def _api_exception_response(exc: exceptions.APIException) -> Response:
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))
    if isinstance(exc, exceptions.ValidationError):
        body = _validation_body(exc)
    else:
        code = exc.detail.code if isinstance(exc.detail, exceptions.ErrorDetail) else exc.default_code
        # A bulk rejection lists the jobs at fault.
        items = getattr(exc, "items", None)
        body = (
            error_body(str(code), str(exc.detail), items=items)
            if items
            else error_body(str(code), str(exc.detail))
        )
    return Response(body, status=exc.status_code, headers=headers)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map an exception to a JSON error response; None lets Django produce a 500."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge()

    if isinstance(exc, JobsRejected):
        exc = BulkRejected([queue_item_error(error) for error in exc.errors], exc.total)
    if isinstance(exc, QueueError):
        response = Response(queue_error_body(exc), status=status_for(exc))
    elif isinstance(exc, exceptions.APIException):
        response = _api_exception_response(exc)
    elif isinstance(exc, DataError):
        # Input the validation missed (e.g. a value out of a column's range).
        log.warning("api_data_error", error=str(exc))
        response = Response(
            error_body("invalid", "A value is out of the range the database accepts."), status=400
        )
    elif isinstance(exc, IntegrityError):
        log.warning("api_integrity_error", error=str(exc))
        response = Response(error_body("conflict", "The request conflicts with existing data."), status=409)
    elif isinstance(exc, SuspiciousOperation):
        # Django's refusals of a malformed request (e.g. more query parameters than
        # DATA_UPLOAD_MAX_NUMBER_FIELDS); their messages name the setting, nothing secret.
        response = Response(error_body("invalid", str(exc)), status=400)
    elif isinstance(exc, RecursionError):
        response = Response(error_body("invalid", "The input is nested too deeply."), status=400)
    elif is_transaction_conflict(exc):
        # Two requests' transactions collided (deadlock, serialization failure) and the
        # retries ran out: nothing was written, and the same request may simply be sent again.
        log.warning("api_transaction_conflict", error=f"{type(exc).__name__}: {exc}"[:300])
        response = Response(
            error_body(
                "transaction_conflict",
                "The request collided with a concurrent one and nothing was written; send it again.",
            ),
            status=409,
            headers={"Retry-After": "1"},
        )
    elif isinstance(exc, (OperationalError, InterfaceError, RedisError)):
        # A store outage: nothing was written (the request's transaction rolled back),
        # and the same request, retried with its idempotency key, is safe.
        log.warning("api_store_unavailable", error=f"{type(exc).__name__}: {exc}"[:300])
        response = Response(
            error_body("store_unavailable", "A data store is unreachable; retry shortly."),
            status=503,
            headers={"Retry-After": "5"},
        )
    else:
        return None
    set_rollback()
    return response
