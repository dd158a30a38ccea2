"""A date hierarchy for large tables: links from the table's first and last dates only.

Django's own hierarchy lists the years, months or days that hold rows with
``SELECT DISTINCT date_trunc(...)`` over the filtered list: a full scan at a
million jobs. This one asks only for the minimum and maximum (two index
probes) and links every period in between; a period without rows simply
shows an empty list.
"""

from __future__ import annotations

import calendar
import datetime

from django import template
from django.contrib.admin.views.main import ChangeList
from django.db.models import Max, Min
from django.utils import formats, timezone
from django.utils.text import capfirst
from django.utils.translation import gettext as _

register = template.Library()


def _bounds(cl: ChangeList, field_name: str) -> tuple[datetime.date, datetime.date] | None:
    found = cl.root_queryset.order_by().aggregate(first=Min(field_name), last=Max(field_name))
    if found["first"] is None:
        return None
    return tuple(
        (timezone.localtime(value) if timezone.is_aware(value) else value).date()
        for value in (found["first"], found["last"])
    )


@register.inclusion_tag("admin/date_hierarchy.html")
def bounded_date_hierarchy(cl: ChangeList) -> dict:
    field_name = cl.date_hierarchy
    field = cl.model._meta.get_field(field_name)
    year_field, month_field, day_field = (f"{field_name}__{part}" for part in ("year", "month", "day"))

    def link(filters: dict) -> str:
        return cl.get_query_string(filters, [f"{field_name}__"])

    def lookup(name: str) -> int | None:
        value = cl.params.get(name)
        if isinstance(value, list):
            value = value[-1]
        return int(value) if value else None

    year, month, day = lookup(year_field), lookup(month_field), lookup(day_field)
    bounds = _bounds(cl, field_name)
    if bounds is None and not year:
        return {"show": False}
    if not year and bounds[0].year == bounds[1].year:
        # Like Django's: start at the only year (and month) there is.
        year = bounds[0].year
        if bounds[0].month == bounds[1].month:
            month = bounds[0].month
    first, last = bounds or (datetime.date.min, datetime.date.max)
    context = {"show": True, "field_name": field.verbose_name}
    if year and month and day:
        chosen = datetime.date(year, month, day)
        context["back"] = {
            "link": link({year_field: year, month_field: month}),
            "title": capfirst(formats.date_format(chosen, "YEAR_MONTH_FORMAT")),
        }
        context["choices"] = [{"title": capfirst(formats.date_format(chosen, "MONTH_DAY_FORMAT"))}]
    elif year and month:
        days = [datetime.date(year, month, d) for d in range(1, calendar.monthrange(year, month)[1] + 1)]
        context["back"] = {"link": link({year_field: year}), "title": str(year)}
        context["choices"] = [
            {
                "link": link({year_field: year, month_field: month, day_field: d.day}),
                "title": capfirst(formats.date_format(d, "MONTH_DAY_FORMAT")),
            }
            for d in days
            if first <= d <= last
        ]
    elif year:
        months = [datetime.date(year, m, 1) for m in range(1, 13)]
        context["back"] = {"link": link({}), "title": _("All dates")}
        context["choices"] = [
            {
                "link": link({year_field: year, month_field: m.month}),
                "title": capfirst(formats.date_format(m, "YEAR_MONTH_FORMAT")),
            }
            for m in months
            if (first.year, first.month) <= (m.year, m.month) <= (last.year, last.month)
        ]
    else:
        context["back"] = None
        context["choices"] = [
            {"link": link({year_field: str(y)}), "title": str(y)} for y in range(first.year, last.year + 1)
        ]
    return context
