"""Admin pagination that never counts a whole large table.

Django's paginator runs ``SELECT COUNT(*)`` over the filtered list on every
page; at a million jobs that alone costs more than the page. Here PostgreSQL
is asked for its estimate first (``pg_class.reltuples`` for an unfiltered
table, the planner's row estimate for a filtered one); only results it
expects to be small (up to ``EXACT_COUNT_LIMIT`` rows, the ones where an
exact number matters) are counted, and that count stops at the limit.

Pages stop at ``MAX_PAGES``: OFFSET walks every skipped row, so deep pages
would be the slow ones; older rows are reached by filtering (date, status,
search) instead.
"""

from __future__ import annotations

import json
import math

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

EXACT_COUNT_LIMIT = 10_000
MAX_PAGES = 200


def capped_count(queryset: QuerySet, limit: int) -> int:
    """The number of rows, counting no further than ``limit``."""
    return queryset.order_by()[:limit].count()


def estimated_count(queryset: QuerySet) -> int:
    """PostgreSQL's estimate of the number of rows, without reading them."""
    if not queryset.query.where:
        with connections[queryset.db].cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [queryset.model._meta.db_table],
            )
            row = cursor.fetchone()
        # -1: never analysed, so no estimate; the caller then counts.
        return max(int(row[0]), 0) if row else 0
    plan = json.loads(queryset.order_by().explain(format="json"))
    if isinstance(plan, list):
        plan = plan[0]
    return int(plan["Plan"]["Plan Rows"])


def count_rows(queryset: QuerySet, limit: int = EXACT_COUNT_LIMIT) -> tuple[int, bool]:
    """(rows, is_estimate): counted when PostgreSQL expects at most ``limit`` rows, estimated beyond.

    Asking the planner first keeps the cost bounded for large results (a
    count of 10,000 rows of a selective filter can still read most of the
    table). If the statistics were stale and more rows match, the count
    stops at ``limit`` and the result is marked as an estimate.
    """
    estimate = estimated_count(queryset)
    if estimate > limit:
        return estimate, True
    counted = capped_count(queryset, limit + 1)
    if counted > limit:
        return max(estimate, counted), True
    return counted, False


class EstimatedCountPaginator(Paginator):
    """Exact counts up to EXACT_COUNT_LIMIT, the planner's estimate beyond; at most MAX_PAGES pages."""

    exact_count_limit = EXACT_COUNT_LIMIT
    max_pages = MAX_PAGES

    @cached_property
    def _counted(self) -> tuple[int, bool]:
        return count_rows(self.object_list, self.exact_count_limit)

    @cached_property
    def count(self) -> int:
        return self._counted[0]

    @property
    def is_estimate(self) -> bool:
        """The count is PostgreSQL's estimate, not a count of rows."""
        return self._counted[1]

    @cached_property
    def num_pages(self) -> int:
        if self.count == 0 and not self.allow_empty_first_page:
            return 0
        hits = max(1, self.count - self.orphans)
        return min(math.ceil(hits / self.per_page), self.max_pages)

    @property
    def is_truncated(self) -> bool:
        """More rows match than the pages reach."""
        return self.count > self.max_pages * self.per_page
