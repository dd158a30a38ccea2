"""A change list that turns a query string PostgreSQL or the date drill-down cannot take into ``?e=1``.

Django redirects to ``?e=1`` when it meets a bad lookup
(``IncorrectLookupParameters``); some values get past its checks and fail
later, as a 500: a NUL byte (PostgreSQL text cannot hold one), a date
drill-down outside the calendar or past year 9999, or a month or day with
no year (a number past any integer column). They are refused here, before
any query runs. What only PostgreSQL can judge (an invalid regular
expression in ``?username__regex=[``) or what fails as the query is built
(``?date_joined__year=99999999999999999999``) is refused as it fails: the
list's queries run in a savepoint, and a data error becomes the same
redirect. A NUL byte in an object's id (its change, history or delete page)
is a 404: no row can have it.

``QueryGuard`` brings this to any ModelAdmin, the project's and those of
other apps (django.contrib.auth's users and groups); the project's admin
site gives it to every admin registered on it (jobsite/admin_site.py).

``DeclaredLookupsOnly`` goes further for the admins that use it: a query
string may name only the list's own filter and drill-down parameters (search,
ordering and page are Django's own), so a lookup no filter offers
(``?id__regex=[``, ``?payload__icontains=x``, ``?started_at__year=99999``)
is refused with a 400 before it can fail in PostgreSQL or scan the table.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.views.main import ORDER_VAR, ChangeList
from django.db import DataError, transaction
from django.http import Http404

from queue_app.admin.pagination import count_agreeing_with

# Raised by a lookup value only as its query is built or run: the values no check foresaw.
QUERY_VALUE_ERRORS = (DataError, ValueError, OverflowError)


class SafeQueryChangeList(ChangeList):
    """Any query string is a page or the ``?e=1`` redirect, never a 500."""

    def get_filters(self, request):
        if any("\x00" in key or "\x00" in value for key, values in request.GET.lists() for value in values):
            raise IncorrectLookupParameters("NUL byte in the query string")
        if self.date_hierarchy:
            check_date_drill_down(request.GET, self.date_hierarchy)
        return super().get_filters(request)

    def get_results(self, request):
        # The count and the page run here. In a savepoint, so that a statement PostgreSQL
        # refuses leaves no aborted transaction behind (ATOMIC_REQUESTS, or a test's).
        try:
            with transaction.atomic(using=self.queryset.db):
                super().get_results(request)
                self.count_what_is_shown()
        except QUERY_VALUE_ERRORS as error:
            raise IncorrectLookupParameters(error) from error

    def count_what_is_shown(self) -> None:
        """Read the rows now, and show no count that they contradict.

        The count and the rows are two statements, each with its own snapshot: jobs that
        changed status in between (a worker taking up a bulk retry) read as "1 result" over
        2 rows, as a list of one page shows every row that matches by then, whatever the
        count said. A page that holds fewer rows than it asked for holds the last ones, so the
        count is what the pages hold; otherwise a lower count (an older snapshot, an estimate
        stopped early) is raised to the rows seen so far.
        """
        # len() runs the page's query once: a queryset keeps its rows for the template (and
        # stays a queryset, which list_editable's formset needs).
        shown = len(self.result_list)
        paginated = self.multi_page and not (self.show_all and self.can_show_all)
        offset = (self.page_num - 1) * self.list_per_page if paginated else 0
        # A page's slice ends at the count: only fewer rows than it asked for mean no more follow.
        asked = min(self.list_per_page, self.result_count - offset) if paginated else None
        complete = not paginated or 0 < shown < asked
        self.result_count = count_agreeing_with(self.paginator, offset + shown, complete=complete)


@functools.cache
def safe_query_changelist(changelist: type[ChangeList]) -> type[ChangeList]:
    """``changelist`` (an admin's own ChangeList class, or Django's) with SafeQueryChangeList's guards."""
    if issubclass(changelist, SafeQueryChangeList):
        return changelist
    return type(f"SafeQuery{changelist.__name__}", (SafeQueryChangeList, changelist), {})


class QueryGuard:
    """A ModelAdmin mixin: no query string and no object id in the path answers a 500."""

    def get_changelist(self, request, **kwargs):
        return safe_query_changelist(super().get_changelist(request, **kwargs))

    def get_object(self, request, object_id: str, from_field=None):
        if "\x00" in object_id:
            # Django's ``get_object`` lets the NUL through to PostgreSQL, which cannot compare it.
            raise Http404("No object has a NUL byte in its id.")
        return super().get_object(request, object_id, from_field)

    def get_search_results(self, request, queryset, search_term: str):
        # The change list refuses a NUL in ``?q=`` already; the autocomplete view does not.
        if "\x00" in search_term:
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)


class GuardedChangeList(SafeQueryChangeList):
    """The project's own lists: also sorted only by their clickable (indexed) columns."""

    def get_ordering(self, request, queryset):
        # Django sorts by any column of ``?o=``, not only those sortable_by makes clickable:
        # keep those, as other columns have no index to sort a large table by.
        if ORDER_VAR in self.params:
            kept = [part for part in self.params[ORDER_VAR].split(".") if self._sortable(part)]
            if kept:
                self.params[ORDER_VAR] = ".".join(kept)
            else:
                del self.params[ORDER_VAR]
        return super().get_ordering(request, queryset)

    def _sortable(self, part: str) -> bool:
        index = part.removeprefix("-")
        if not index.isdigit() or int(index) >= len(self.list_display):
            return False
        return self.list_display[int(index)] in self.sortable_by


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


def declared_parameters(model_admin, request) -> set[str]:
    """The query parameters the list filters and the date drill-down of ``model_admin`` read."""
    names: set[str] = set()
    for spec in model_admin.get_list_filter(request):
        if isinstance(spec, type) and issubclass(spec, admin.SimpleListFilter):
            names.add(spec.parameter_name)
            continue
        field_path, filter_class = (
            spec if isinstance(spec, tuple | list) else (spec, admin.FieldListFilter.create)
        )
        field = get_fields_from_path(model_admin.model, field_path)[-1]
        field_filter = filter_class(field, request, {}, model_admin.model, model_admin, field_path=field_path)
        names.update(field_filter.expected_parameters())
    if model_admin.date_hierarchy:
        names.update(f"{model_admin.date_hierarchy}__{part}" for part in ("year", "month", "day"))
    return names


class DeclaredLookupsOnly(QueryGuard):
    """A ModelAdmin mixin: the guarded change list, filtered only through its declared filters."""

    def get_changelist(self, request, **kwargs):
        return GuardedChangeList

    def lookup_allowed(self, lookup, value, request) -> bool:
        # Django's default lets any lookup on a local field through (to fail later, or scan).
        return lookup in declared_parameters(self, request)
