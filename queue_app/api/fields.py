"""The API's input fields, strict about JSON types.

DRF would turn ``12`` into ``"12"`` and ``"5"`` into ``5``; these refuse a value
of the wrong JSON type instead, and check a value's range by the same rule as the
service (a priority by ``resolved_priority``, an expiry by ``MAX_EXPIRES_IN``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from queue_app.engine.job_requests import MAX_EXPIRES_IN, PRIORITY_RULE, resolved_priority
from queue_app.engine.uniqueness import MAX_UNIQUE_FOR_SECONDS
from queue_app.exceptions import InvalidJob
from queue_app.states import PRIORITY_MAX, PRIORITY_MIN, Priority, Status

# Far enough for any real schedule, near enough that now + delay is a valid time.
MAX_DELAY_SECONDS = 100 * 365 * 24 * 3600


class StrictCharField(serializers.CharField):
    """A JSON string only; whitespace is kept (it is part of a key or a name)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class JobTypeField(StrictCharField):
    """A registered job type; the schema lists the registry (see schema.py)."""


class QueueNameField(StrictCharField):
    """A configured queue; the schema lists the configured names (see schema.py)."""


class StrictChoiceField(serializers.ChoiceField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": list(Priority.values)},
            {"type": "integer", "minimum": PRIORITY_MIN, "maximum": PRIORITY_MAX},
        ],
        "default": Priority.MEDIUM.value,
    }
)
class PriorityField(serializers.Field):
    """A named tier or an integer (higher runs sooner), checked by the rule ``enqueue_job``
    applies (engine/job_requests.py), so the API and the Python API cannot drift apart."""

    default_error_messages = {"invalid": PRIORITY_RULE[0].upper() + PRIORITY_RULE[1:] + "."}

    def to_internal_value(self, data: Any) -> str | int:
        try:
            resolved_priority(data)
        except InvalidJob:
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "Must be a JSON integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class SecondsField(serializers.Field):
    """A JSON number of seconds from 0 (above 0 with ``above_zero``) to ``maximum``."""

    maximum: float
    above_zero = False

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        # Compare before converting: float() of a huge integer overflows. NaN fails both.
        if not (0 < data if self.above_zero else 0 <= data) or not data <= self.maximum:
            self.fail("range")
        return float(data)

    def to_representation(self, value: float) -> float:
        return value


@extend_schema_field({"type": "number", "minimum": 0, "maximum": MAX_DELAY_SECONDS})
class DelaySecondsField(SecondsField):
    maximum = MAX_DELAY_SECONDS
    default_error_messages = {
        "invalid": "Must be a number of seconds.",
        "range": f"Must be between 0 and {MAX_DELAY_SECONDS}.",
    }


@extend_schema_field(
    {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": MAX_UNIQUE_FOR_SECONDS}
)
class UniqueForField(SecondsField):
    maximum, above_zero = MAX_UNIQUE_FOR_SECONDS, True
    default_error_messages = {
        "invalid": "Must be a number of seconds.",
        "range": f"Must be above 0 and at most {MAX_UNIQUE_FOR_SECONDS}.",
    }


@extend_schema_field({"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": MAX_EXPIRES_IN})
class ExpiresInField(SecondsField):
    maximum, above_zero = MAX_EXPIRES_IN, True
    default_error_messages = {
        "invalid": "Must be a number of seconds.",
        "range": f"Must be above 0 and at most {MAX_EXPIRES_IN:g}.",
    }


class UniqueStatesField(serializers.ListField):
    """A non-empty list of job statuses (its schema: see schema.py)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=StrictChoiceField(choices=Status.choices), allow_empty=False, **kwargs)


@extend_schema_field(OpenApiTypes.DATETIME)
class OffsetDateTimeField(serializers.Field):
    """ISO 8601 with a UTC offset: a time without one is ambiguous, so it is refused."""

    default_error_messages = {
        "invalid": "Must be an ISO 8601 date-time, e.g. 2030-01-31T09:00:00+00:00.",
        "naive": "Must include a UTC offset (e.g. +00:00 or Z).",
    }

    # What an ISO 8601 date-time is written with. Python's parser skips one unexpected
    # character before the offset ("...00:00\u0000Z"), so anything else is refused first.
    characters = frozenset("0123456789-:.,+TZW ")

    def to_internal_value(self, data: Any) -> datetime:
        if not isinstance(data, str) or not self.characters.issuperset(data):
            self.fail("invalid")
        try:
            value = parse_datetime(data)
        except ValueError:
            value = None
        if value is None:
            self.fail("invalid")
        if timezone.is_naive(value):
            self.fail("naive")
        try:
            return value.astimezone(UTC)
        except OverflowError:
            self.fail("invalid")

    def to_representation(self, value: datetime) -> str:
        return value.isoformat()


@extend_schema_field({"type": "object", "additionalProperties": True})
class PayloadField(serializers.Field):
    """A JSON object, passed on untouched: the service checks its size, depth and strings."""

    default_error_messages = {"invalid": "Must be a JSON object."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field({"nullable": True})
class ResultField(serializers.Field):
    """Whatever JSON the handler returned."""

    def to_representation(self, value: Any) -> Any:
        return value
