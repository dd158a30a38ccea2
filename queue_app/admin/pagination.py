"""Admin pagination that never counts a whole large table.

Django's paginator runs ``SELECT COUNT(*)`` over the filtered list on every
page; at a million jobs that alone costs more than the page. Here the count
is queue_app/engine/counts.py's: exact up to ``EXACT_COUNT_LIMIT`` rows,
PostgreSQL's estimate beyond.

Pages stop at ``MAX_PAGES``: OFFSET walks every skipped row, so deep pages
would be the slow ones; older rows are reached by filtering (date, status,
search) instead.
"""

from __future__ import annotations

import math

from django.core.paginator import Paginator
from django.utils.functional import cached_property

from queue_app.engine.counts import EXACT_COUNT_LIMIT, capped_count, count_rows, estimated_count

__all__ = [
    "EXACT_COUNT_LIMIT",
    "EstimatedCountPaginator",
    "capped_count",
    "count_agreeing_with",
    "count_rows",
    "estimated_count",
]

MAX_PAGES = 200


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


def count_agreeing_with(paginator: Paginator, seen: int, *, complete: bool) -> int:
    """The paginator's count made to agree with ``seen`` rows read after it was taken:
    exactly ``seen`` when ``complete`` (no matching row lies past them), else at least
    ``seen``. An exact figure is no longer an estimate."""
    count = seen if complete else max(paginator.count, seen)
    paginator.count = count  # a cached_property: the instance's value replaces it
    paginator.__dict__.pop("num_pages", None)
    if isinstance(paginator, EstimatedCountPaginator):
        paginator._counted = (count, paginator.is_estimate and not complete)
    return count
