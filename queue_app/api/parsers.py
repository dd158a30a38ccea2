"""A JSON parser that turns every malformed or hostile body into a 400 or 413, never a 500.

DRF's own parser lets ``RecursionError`` (JSON nested ~1,000 deep) escape as a
500 and accepts NaN, Infinity and numbers that overflow to infinity, which
neither PostgreSQL's jsonb nor strict JSON clients accept. It also takes an
object that names a key twice, keeping the last value (RFC 8259 leaves such
objects' meaning to each reader, so two readers of one body may disagree):
here that is a 400 naming the key and where it is.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.parsers import BaseParser, get_encoding

from queue_app.conf import queue_settings

# Room for everything around the payload (other fields, escapes, whitespace).
ENVELOPE_BYTES = 64 * 1024


class RequestTooLarge(APIException):
    status_code = 413
    default_code = "request_too_large"
    default_detail = "The request body is too large."


def max_body_bytes() -> int:
    """The larger of Django's upload limit and what one maximal payload needs."""
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
    return max(django_limit, 2 * queue_settings().MAX_PAYLOAD_BYTES + ENVELOPE_BYTES)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


class _DuplicateKeys:
    """An ``object_pairs_hook`` that builds each object as json does and notes the first
    one that names a key twice (objects are built innermost first, so where it sits is
    found once the whole body is read)."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.container: dict | None = None

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict:
        built = dict(pairs)
        if len(built) < len(pairs) and self.container is None:
            seen: set[str] = set()
            self.key = next(key for key, _ in pairs if key in seen or seen.add(key))
            self.container = built
        return built

    def reject(self, document: Any) -> None:
        """Raise the 400 for the duplicate, named with the path of its object in ``document``."""
        path = _path_to(document, self.container)
        location = ".".join(path) if path else "the body"
        message = f"The key {self.key!r} appears more than once in {location}; send it once."
        if not isinstance(document, dict):
            raise ParseError(f"JSON parse error - {message}")
        # Named like any other error of a field: a field sent twice, or the field it is inside.
        raise ValidationError({path[0] if path else self.key: [message]})


def _path_to(document: Any, target: dict | None) -> list[str]:
    """The keys and indexes from ``document`` down to the object ``target`` (by identity)."""
    pending: list[tuple[Any, list[str]]] = [(document, [])]
    while pending:
        value, path = pending.pop()
        if value is target:
            return path
        if isinstance(value, dict):
            pending.extend((item, [*path, str(key)]) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((item, [*path, str(index)]) for index, item in enumerate(value))
    return []


def loads(text: str) -> Any:
    """Strict JSON: no NaN/Infinity, no overflowing numbers, no key twice in an object;
    depth errors become ParseError."""
    duplicates = _DuplicateKeys()
    try:
        document = json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=duplicates
        )
    except RecursionError:
        raise ParseError("JSON parse error - nested too deeply") from None
    except ValueError as exc:
        # Also covers integers longer than Python's digit limit.
        raise ParseError(f"JSON parse error - {exc}") from None
    if duplicates.container is not None:
        duplicates.reject(document)
    return document


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        parser_context = parser_context or {}
        limit = max_body_bytes()
        request = parser_context.get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise RequestTooLarge(f"The request body is larger than {limit} bytes.")
        # Read the stream ourselves (not request.body) so the limit holds without
        # a Content-Length header too.
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise RequestTooLarge(f"The request body is larger than {limit} bytes.")
        # A client that closed its side early sends less than it declared; what
        # arrived may still parse, but it is not the request the client meant.
        if declared and declared.isdigit() and len(body) < int(declared):
            raise ParseError(
                f"The request body ended after {len(body)} of the {declared} bytes "
                "its Content-Length declares."
            )
        encoding = get_encoding(parser_context)
        try:
            text = body.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not valid {encoding}: {exc.reason}") from None
        return loads(text)
