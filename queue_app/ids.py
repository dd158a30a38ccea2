"""Job ids: the one place that decides whether a value names a job."""

from __future__ import annotations

import re
import uuid

# How PostgreSQL (and this project) prints a UUID; matched before parsing, the fast path.
_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


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
