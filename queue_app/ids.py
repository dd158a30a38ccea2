"""Job ids: the one place that makes them and decides whether a value names a job."""

from __future__ import annotations

import os
import re
import time
import uuid
from datetime import datetime

# How PostgreSQL (and this project) prints a UUID; matched before parsing, the fast path.
_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# The id's last digits, random in a UUIDv7: what the admin's lists show of an id, and what
# idx_jobs_time_id_tail indexes so the search box finds a job by them.
ID_TAIL_DIGITS = 8
# The id's first digits: its creation time in spans of 2**24 ms (4.7 hours). The tail index
# leads with them, so a new job's entry lands beside the span's other new entries, not on a
# random page of the whole history's (see idx_jobs_time_id_tail in models.py).
ID_SPAN_DIGITS = 6
_SPAN_MS = 1 << (48 - 4 * ID_SPAN_DIGITS)


def new_job_id() -> uuid.UUID:
    """A new job id: a time-ordered UUID, version 7 (RFC 9562).

    Random (version 4) ids scatter each insert over the whole primary key and the
    job_id indexes of the log and the outbox: in a big table nearly every insert
    reads and dirties a page of its own, and the first write to each page after a
    checkpoint logs all of it. Time-ordered ids append at the right edge instead.
    The 12 bits after the version hold the sub-millisecond clock (RFC 9562, 6.2,
    method 3), so ids sort by creation time to 1/4096 ms; 62 bits stay random.
    """
    millis, nanos = divmod(time.time_ns(), 1_000_000)
    return uuid7(millis, nanos * 4096 // 1_000_000, int.from_bytes(os.urandom(8)))


def uuid7(unix_ms: int, rand_a: int, rand_b: int) -> uuid.UUID:
    """The version 7 layout: 48 bits of Unix milliseconds, the version, 12 bits of
    ``rand_a``, the variant, then the low 62 bits of ``rand_b``."""
    value = (unix_ms & (1 << 48) - 1) << 80 | 0x7 << 76 | (rand_a & 0xFFF) << 64
    return uuid.UUID(int=value | 0b10 << 62 | rand_b & (1 << 62) - 1)


def id_spans(since: datetime, until: datetime) -> list[str]:
    """The first ``ID_SPAN_DIGITS`` digits of every id made from ``since`` to ``until``, with
    a span of margin each side (an id is made a moment before its row's ``created_at``)."""
    first, last = (int(moment.timestamp() * 1000) // _SPAN_MS for moment in (since, until))
    return [f"{span:0{ID_SPAN_DIGITS}x}" for span in range(max(first - 1, 0), last + 2)]


def parse_job_id(value: object) -> uuid.UUID | None:
    """The UUID ``value`` spells (any form ``uuid.UUID`` accepts), or None when it cannot name a job."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def canonical_job_id(value: str) -> str | None:
    """The id as PostgreSQL prints it, or None when it cannot name a job (e.g. garbage in Redis)."""
    if _CANONICAL.fullmatch(value):
        return value
    parsed = parse_job_id(value)
    return None if parsed is None else str(parsed)
