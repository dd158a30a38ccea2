"""Query-string filters of the job list (django-filter); ordering is applied by the paginator."""

from __future__ import annotations

from datetime import UTC, datetime

import django_filters
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField

from queue_app.models import Job
from queue_app.states import Priority, Status

# name in ?ordering= -> keyset columns (the last one unique), all in one direction.
JOB_ORDERINGS = {
    "-created_at": ("-created_at", "-id"),
    "created_at": ("created_at", "id"),
}
DEFAULT_JOB_ORDERING = "-created_at"


class UTCDateTimeField(IsoDateTimeField):
    """ISO 8601; a time without an offset is read as UTC (the project's TIME_ZONE)."""

    def to_python(self, value: object) -> datetime | None:
        result = super().to_python(value)
        if result is None:
            return None
        try:
            return result.astimezone(UTC)
        except OverflowError:
            raise ValidationError("Enter a valid date/time.", code="invalid") from None


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class JobFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=Status.choices, help_text="Repeat for several.")
    priority = django_filters.MultipleChoiceFilter(choices=Priority.choices, help_text="Repeat for several.")
    type = django_filters.CharFilter(help_text="Exact job type.")
    queue = django_filters.CharFilter(help_text="Exact queue name.")
    created_after = UTCDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="created_at >= this ISO 8601 time."
    )
    created_before = UTCDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="created_at < this ISO 8601 time."
    )
    ordering = django_filters.ChoiceFilter(
        choices=[(name, name) for name in JOB_ORDERINGS],
        method="validated_only",
        help_text=f"Default {DEFAULT_JOB_ORDERING} (newest first).",
    )

    class Meta:
        model = Job
        fields: list[str] = []

    def validated_only(self, queryset, name, value):
        """The keyset paginator orders the rows; the filter only checks the value."""
        return queryset
