"""Counting rows without counting a whole large table.

``SELECT COUNT(*)`` reads every matching row; at a million jobs that costs
hundreds of milliseconds. A count here stops at ``EXACT_COUNT_LIMIT`` + 1
rows: at or below the limit it is exact, beyond it the figure is
PostgreSQL's estimate (``pg_class.reltuples`` for an unfiltered table, the
planner's row estimate for a filtered one), marked as such.

The capped count decides first when an index serves the filter (no filter,
conditions on one indexed field, or equalities whose values one partial index's
condition holds, as a job's status): it reads at most limit + 1 index
entries, and statistics gone stale (jobs moved to another status or deleted
since the last ANALYZE) cannot make a small result look large. Other filters
(a text search, conditions on several columns) are asked of the planner first:
counting their matches up to the limit can read most of the table.
"""

from __future__ import annotations

import json

from django.db import connections
from django.db.models import QuerySet
from django.db.models.expressions import Col
from django.db.models.sql.where import WhereNode

from queue_app.engine import sql

EXACT_COUNT_LIMIT = 10_000

# Lookups a btree index answers as a range of its entries.
INDEX_LOOKUPS = frozenset({"exact", "in", "gt", "gte", "lt", "lte", "range"})


def capped_count(queryset: QuerySet, limit: int) -> int:
    """The number of rows, counting no further than ``limit``."""
    return queryset.order_by()[:limit].count()


def estimated_count(queryset: QuerySet) -> int:
    """PostgreSQL's estimate of the number of rows, without reading them."""
    if not queryset.query.where:
        with connections[queryset.db].cursor() as cursor:
            cursor.execute(sql.query("table_row_estimate"), {"table": queryset.model._meta.db_table})
            row = cursor.fetchone()
        # -1: never analysed, so no estimate; the caller then counts.
        return max(int(row[0]), 0) if row else 0
    explained = queryset.order_by().explain(format="json")
    if not explained:
        # Django runs no EXPLAIN for a filter that can match nothing (``id__in=[]``).
        return 0
    plan = json.loads(explained)
    if isinstance(plan, list):
        plan = plan[0]
    return int(plan["Plan"]["Plan Rows"])


def _filter_conditions(where: WhereNode) -> list | None:
    """Each condition (lookup) of ``where``; None if any condition is no index lookup."""
    if where.negated:
        return None
    conditions = []
    for child in where.children:
        if isinstance(child, WhereNode):
            inner = _filter_conditions(child)
            if inner is None:
                return None
            conditions += inner
        elif isinstance(getattr(child, "lhs", None), Col) and child.lookup_name in INDEX_LOOKUPS:
            conditions.append(child)
        else:
            return None
    return conditions


def _indexed_fields(model) -> set:
    """Fields of ``model`` that lead a whole-table (not partial) index."""
    meta = model._meta
    fields = {field for field in meta.concrete_fields if field.primary_key or field.unique or field.db_index}
    for index in meta.indexes:
        if index.condition is None and index.fields:
            fields.add(meta.get_field(index.fields[0].removeprefix("-")))
    return fields


def _partial_index_values(model) -> dict[str, list[frozenset]]:
    """For each field a partial index's condition names alone (``status = 'failed'``,
    ``status IN (...)``): the values of each such condition."""
    held: dict[str, list[frozenset]] = {}
    for index in model._meta.indexes:
        condition = index.condition
        if condition is None or condition.negated or len(condition.children) != 1:
            continue
        lookup, value = condition.children[0]
        name, _, operator = lookup.partition("__")
        if operator in ("", "exact"):
            held.setdefault(name, []).append(frozenset([value]))
        elif operator == "in":
            held.setdefault(name, []).append(frozenset(value))
    return held


def index_served(queryset: QuerySet) -> bool:
    """No filter, conditions on one field an index leads, or equalities whose values one partial
    index's condition holds (a job's status: idx_jobs_live_status, idx_jobs_<status>_at): a
    capped count reads no more entries."""
    conditions = _filter_conditions(queryset.query.where)
    if conditions is None:
        return False
    fields = {condition.lhs.target for condition in conditions}
    if len(fields) > 1:
        return False
    if fields <= _indexed_fields(queryset.model):
        return True
    if any(condition.lookup_name != "exact" for condition in conditions):
        return False
    # Several values may span two indexes, which no plan reads as one.
    values = {condition.rhs for condition in conditions}
    (field,) = fields
    return any(values <= held for held in _partial_index_values(queryset.model).get(field.name, ()))


def count_rows(queryset: QuerySet, limit: int = EXACT_COUNT_LIMIT) -> tuple[int, bool]:
    """(rows, is_estimate): counted up to ``limit``, PostgreSQL's estimate beyond.

    Where an index serves the filter the capped count decides, so stale statistics never
    overstate a small result. Otherwise the planner is asked first, as counting a selective
    filter's 10,000 rows can still read most of the table; if its statistics were stale and
    more rows match, the count stops at ``limit`` and the result is marked as an estimate.
    """
    if index_served(queryset):
        counted = capped_count(queryset, limit + 1)
        if counted <= limit:
            return counted, False
        return max(estimated_count(queryset), counted), True
    estimate = estimated_count(queryset)
    if estimate > limit:
        return estimate, True
    counted = capped_count(queryset, limit + 1)
    if counted > limit:
        return max(estimate, counted), True
    return counted, False
