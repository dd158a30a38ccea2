"""Search the job history through the job table's indexes, never a text cast of the id.

The admin's search box maps to these filters. Ids are matched on the
primary key (exactly, or as a range for a hex prefix) or, for the tail the
lists show, on idx_jobs_time_id_tail; idempotency and unique keys on their indexes,
types through the handler registry (an indexed IN list). Only free text, and
digits from the middle of an id, reach a scan: the last error, the ids' text.
"""

from __future__ import annotations

import re
import uuid

from django.db.models import F, Lookup, Min, Q, TextField, Value
from django.db.models.functions import Cast, Left, Replace, Right
from django.db.models.lookups import Exact, In
from django.utils import timezone

from queue_app.handlers import registered_types
from queue_app.ids import ID_SPAN_DIGITS, ID_TAIL_DIGITS, id_spans, parse_job_id
from queue_app.models import Job

# 8 to 31 hex digits: part of an id (the list shows its last 8).
ID_PREFIX = re.compile(r"^[0-9a-f]{8,31}$")


# PostgreSQL text cannot hold a NUL byte, so a term with one matches no row (and would
# fail as a query parameter). The change list refuses it already; the autocomplete view does not.
MATCHES_NOTHING = Q(pk__in=[])


def full_id(term: str) -> uuid.UUID | None:
    return parse_job_id(term)


def id_digits(term: str) -> str | None:
    """A term's hex digits when it is part of an id, as the list shows it or pasted from
    anywhere (dashes and a leading ellipsis left out); None for other text."""
    digits = term.lstrip("….").replace("-", "").lower()
    return digits if ID_PREFIX.match(digits) else None


def _id_prefix_range(digits: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The id range a hex prefix covers: a range scan of the primary key, not a text match."""
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def id_fragment_filter(digits: str) -> Q:
    """Ids starting with ``digits`` (a primary-key range) when there are any; else ids ending
    with them, such as the tail the list shows (probes of idx_jobs_time_id_tail, one per
    time span of the history, by their last digits); else ids that hold them anywhere: one
    scan of the ids' text, run only when neither index has found a job."""
    prefix = Q(id__range=_id_prefix_range(digits))
    if Job.objects.filter(prefix).exists():
        return prefix
    hex_text = Replace(Cast("id", TextField()), Value("-"), Value(""))
    # The indexed expressions, as idx_jobs_time_id_tail has them (models.Job.Meta.indexes).
    span = Left(Cast("id", TextField()), ID_SPAN_DIGITS)
    tail = Right(Cast("id", TextField()), ID_TAIL_DIGITS)
    suffix = (
        Q(In(span, history_spans()))
        & Q(Exact(tail, Value(digits[-ID_TAIL_DIGITS:])))
        & Q(ILike(hex_text, f"%{digits}"))
    )
    if Job.objects.filter(suffix).exists():
        return suffix
    return Q(ILike(hex_text, f"%{digits}%"))


def history_spans() -> list[str]:
    """The time spans the ids of the job table's rows were made in: from its oldest job
    (an endpoint of idx_jobs_created_at) to now. An id made at another time (given by hand)
    is found by the scan of the ids' text instead."""
    oldest = Job.objects.aggregate(oldest=Min("created_at"))["oldest"]
    return [] if oldest is None else id_spans(oldest, timezone.now())


class ILike(Lookup):
    """``column ILIKE pattern``.

    Django's icontains is ``UPPER(column) LIKE UPPER(term)``, on which the
    planner has no statistics and guesses a tiny match rate; with ILIKE it
    reads the column's statistics and, when matches are common, walks the
    created_at index and stops after one page instead of sorting a full scan.
    """

    lookup_name = "ilike"
    prepare_rhs = False  # the pattern is passed as built

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} ILIKE {rhs}", [*lhs_params, *rhs_params]


def words_pattern(words: list[str]) -> str:
    """A LIKE pattern matching the words in this order, anything around and between them."""
    escaped = [word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") for word in words]
    return "%" + "%".join(escaped) + "%"


def search_words(search_term: str) -> list[str]:
    """The search box's words; commas separate too, so pasted id lists work."""
    return search_term.replace(",", " ").split()


def job_search_filter(search_term: str) -> Q:
    """What the search box matches, shaped so PostgreSQL can use the job table's indexes.

    One or more full ids match the primary key (or an idempotency or unique
    key) exactly. A hex prefix of 8+ digits is a primary-key range; other 8+
    digits of an id, like the tail the list shows, match where they stand in it.
    Text that is an idempotency key or a unique key finds the jobs holding it
    (a probe of each key's index, which the key leads).
    Anything else matches a registered type containing it (an indexed
    IN list, from the registry) or the last error containing its words in
    order: one ILIKE, skipping the empty errors of successful jobs, so the
    planner estimates one condition, not a product of guesses.
    """
    if "\x00" in search_term:
        return MATCHES_NOTHING
    words = search_words(search_term)
    text = " ".join(words)
    exact_key = Q(idempotency_key=text) | Q(unique_key=text)
    ids = [full_id(word) for word in words]
    if all(ids):
        return Q(id__in=ids) | exact_key
    digits = id_digits(text) if len(words) == 1 else None
    # All-digit words are as likely to be numbers in an error message.
    if digits is not None and not text.isdigit():
        return id_fragment_filter(digits) | exact_key
    if Job.objects.filter(exact_key).exists():
        return exact_key
    types = [name for name in registered_types() if text.lower() in name.lower()]
    matches = Q(type__in=[text, *types]) | (
        ~Q(last_error="") & Q(ILike(F("last_error"), words_pattern(words)))
    )
    # ...and as likely part of an id: they match ids too, as other digits do.
    return matches | id_fragment_filter(digits) if digits is not None else matches


def log_search_filter(search_term: str) -> Q:
    """Whole job ids find those jobs' trails (the foreign-key index); other words, messages."""
    if "\x00" in search_term:
        return MATCHES_NOTHING
    words = search_words(search_term)
    ids = [full_id(word) for word in words]
    if all(ids):
        return Q(job_id__in=ids)
    return Q(ILike(F("message"), words_pattern(words)))
