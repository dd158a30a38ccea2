"""Keyset ("cursor") pagination: every page is one index range scan, however deep.

DRF's CursorPagination positions on the first ordering column alone and
skips ties with an OFFSET; jobs enqueued in one transaction share their
``created_at``, so a large bulk would page by OFFSET. Here the cursor holds
the whole key (``created_at``, ``id``) and the next page is
``WHERE (created_at, id) < (:c, :i) ORDER BY created_at DESC, id DESC LIMIT n``,
which PostgreSQL answers from the ``created_at`` index at any depth.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model, Q, QuerySet
from rest_framework import serializers
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from queue_app.api.filters import DEFAULT_JOB_ORDERING, JOB_ORDERINGS


def _invalid(param: str, message: str) -> serializers.ValidationError:
    return serializers.ValidationError({param: [message]})


def _cursor_value(field, value: Any) -> Any:
    """A cursor's value for ``field``, as the query will send it; raises for what no row can hold
    (a time beyond year 9999 in UTC, an integer beyond 64 bits), which PostgreSQL would refuse."""
    value = field.to_python(value)
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC)  # OverflowError past the year 9999
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ValueError("integer beyond 64 bits")
    return value


class KeysetPagination(BasePagination):
    # name -> columns; the last column must be unique, all share one direction.
    orderings: dict[str, tuple[str, ...]] = {"id": ("id",)}
    default_ordering = "id"
    ordering_param: str | None = None
    cursor_param = "cursor"
    page_size_param = "page_size"
    page_size = 50
    max_page_size = 500

    def paginate_queryset(self, queryset: QuerySet, request: Request, view=None) -> list[Model]:
        self.request = request
        self.ordering = self._ordering(request)
        columns = self.orderings[self.ordering]
        size = self._page_size(request)
        cursor = self._decode(request, queryset.model, columns)
        self.has_cursor = cursor is not None
        self.reverse = bool(cursor and cursor[1])
        if self.reverse:
            columns = tuple(_flip(column) for column in columns)
        queryset = queryset.order_by(*columns)
        if cursor is not None:
            queryset = queryset.filter(_beyond(columns, cursor[0]))
        rows = list(queryset[: size + 1])
        self.has_more = len(rows) > size
        rows = rows[:size]
        if self.reverse:
            rows.reverse()
        self.rows = rows
        return rows

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"next": self.next_link(), "previous": self.previous_link(), "results": data})

    def next_link(self) -> str | None:
        more_ahead = self.has_more if not self.reverse else bool(self.rows)
        return self._link(self.rows[-1], reverse=False) if more_ahead and self.rows else None

    def previous_link(self) -> str | None:
        more_behind = self.has_more if self.reverse else self.has_cursor
        return self._link(self.rows[0], reverse=True) if more_behind and self.rows else None

    # --- parsing ---------------------------------------------------------

    def _ordering(self, request: Request) -> str:
        if self.ordering_param is None:
            return self.default_ordering
        name = request.query_params.get(self.ordering_param) or self.default_ordering
        if name not in self.orderings:
            raise _invalid(self.ordering_param, f"Must be one of {', '.join(self.orderings)}.")
        return name

    def _page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_param)
        if raw is None or raw == "":
            return self.page_size
        # ASCII digits only: "²" is a digit int() cannot read, and thousands of digits are past
        # int()'s limit.
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 9) or not 1 <= int(raw) <= self.max_page_size:
            raise _invalid(self.page_size_param, f"Must be an integer from 1 to {self.max_page_size}.")
        return int(raw)

    def _decode(self, request: Request, model: type[Model], columns: tuple[str, ...]):
        raw = request.query_params.get(self.cursor_param)
        if not raw:
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(raw.encode("ascii")))
            if data["o"] != self.ordering or len(data["v"]) != len(columns):
                raise ValueError("cursor from another ordering")
            values = [
                _cursor_value(model._meta.get_field(column.lstrip("-")), value)
                for column, value in zip(columns, data["v"], strict=True)
            ]
            return values, bool(data["r"])
        except (
            ValueError,
            TypeError,
            KeyError,
            OverflowError,  # an integer column's value given as 1e999
            UnicodeError,
            binascii.Error,
            DjangoValidationError,
        ):
            raise _invalid(self.cursor_param, "Invalid cursor.") from None

    def _link(self, row: Model, *, reverse: bool) -> str:
        columns = self.orderings[self.ordering]
        values = [_plain(getattr(row, column.lstrip("-"))) for column in columns]
        token = json.dumps({"o": self.ordering, "v": values, "r": reverse}, separators=(",", ":"))
        cursor = base64.urlsafe_b64encode(token.encode()).decode("ascii")
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.cursor_param, cursor)

    # --- schema -----------------------------------------------------------

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        link = {"type": "string", "format": "uri", "nullable": True}
        return {
            "type": "object",
            "required": ["next", "previous", "results"],
            "properties": {"next": link, "previous": link, "results": schema},
        }

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        return [
            {
                "name": self.cursor_param,
                "in": "query",
                "required": False,
                "description": "Opaque position from a previous page's next or previous link.",
                "schema": {"type": "string"},
            },
            {
                "name": self.page_size_param,
                "in": "query",
                "required": False,
                "description": f"Results per page (default {self.page_size}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
        ]


def _flip(column: str) -> str:
    return column[1:] if column.startswith("-") else f"-{column}"


def _beyond(columns: tuple[str, ...], values: list[Any]) -> Q:
    """Rows strictly after ``values`` in the order of ``columns`` (a row-value comparison).

    The leading inclusive bound on the first column is redundant logically but
    lets PostgreSQL use that column's index as a range.
    """
    first = columns[0].lstrip("-")
    descending = columns[0].startswith("-")
    bound = Q(**{f"{first}__{'lte' if descending else 'gte'}": values[0]})
    after = Q()
    for i, column in enumerate(columns):
        name = column.lstrip("-")
        op = "lt" if column.startswith("-") else "gt"
        equal = {columns[j].lstrip("-"): values[j] for j in range(i)}
        after |= Q(**equal, **{f"{name}__{op}": values[i]})
    return bound & after


def _plain(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, int):
        return value
    return str(value)


class JobPagination(KeysetPagination):
    orderings = JOB_ORDERINGS
    default_ordering = DEFAULT_JOB_ORDERING
    ordering_param = "ordering"


class JobLogPagination(KeysetPagination):
    """A job's trail, oldest first; ids grow with time."""

    orderings = {"id": ("id",)}
    default_ordering = "id"
    page_size = 100
