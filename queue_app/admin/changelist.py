"""A change list that turns a query string PostgreSQL or the date drill-down cannot take into ``?e=1``.

Django redirects to ``?e=1`` when it meets a bad lookup
(``IncorrectLookupParameters``); some values get past its checks and fail
later, as a 500: a NUL byte (PostgreSQL text cannot hold one), a date
drill-down outside the calendar or past year 9999, or a month or day with
no year (a number past any integer column). They are refused here, before
any query runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList


class GuardedChangeList(ChangeList):
    def get_filters(self, request):
        if any("\x00" in key or "\x00" in value for key, values in request.GET.lists() for value in values):
            raise IncorrectLookupParameters("NUL byte in the query string")
        if self.date_hierarchy:
            check_date_drill_down(request.GET, self.date_hierarchy)
        return super().get_filters(request)


def check_date_drill_down(query, field_name: str) -> None:
    """Raise IncorrectLookupParameters unless year[/month[/day]] names a period the calendar has."""
    year, month, day = (query.get(f"{field_name}__{part}") for part in ("year", "month", "day"))
    if year is None:
        if month is not None or day is not None:
            raise IncorrectLookupParameters("a month or day without a year")
        return
    try:
        start = datetime(int(year), int(month or 1), int(day or 1))
        # The end of the period must exist too: Django computes it next.
        if day is not None:
            start + timedelta(days=1)
        elif month is not None:
            start + timedelta(days=32)
        else:
            start.replace(year=start.year + 1)
    except (ValueError, OverflowError) as error:
        raise IncorrectLookupParameters(error) from error
