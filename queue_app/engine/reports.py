"""What a running attempt reports while it runs: progress on the job, lines in its log trail.

Fenced like every write made for a running attempt: nothing is written once the
attempt no longer holds the job (a rescue, a later claim or a settle moved it on),
and the caller learns so from the False these return. Rate limits are the caller's
(``queue_app.reports``): these write what they are given.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from django.db import connection

from queue_app.engine import sql
from queue_app.states import RUNNING


@dataclass(frozen=True)
class LogLine:
    """One row of the job's trail, as a running attempt writes it."""

    event: str
    level: str
    message: str
    extra: dict[str, Any]


def write_progress(job_id: str, fence: int, fraction: float, message: str) -> bool:
    """Set the job's progress (0..1), its message and time; False: the attempt no longer holds the job."""
    params = {"id": job_id, "fence": fence, "fraction": fraction, "message": message, "running": _RUNNING}
    with connection.cursor() as cursor:
        cursor.execute(sql.query("write_progress"), params)
        return cursor.fetchone() is not None


def write_log_lines(job_id: str, fence: int, lines: Sequence[LogLine]) -> bool:
    """Append ``lines`` to the job's trail in one statement; False (none written): the
    attempt no longer holds the job."""
    if not lines:
        return True
    rows = [asdict(line) for line in lines]
    params = {"id": job_id, "fence": fence, "lines": json.dumps(rows), "running": _RUNNING}
    with connection.cursor() as cursor:
        cursor.execute(sql.query("write_log_lines"), params)
        return bool(cursor.fetchall())


_RUNNING = sorted(RUNNING)
