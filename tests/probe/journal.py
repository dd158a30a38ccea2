"""An append-only file of handler executions that survives what the database does not.

An atomic handler's own writes roll back when its completion is fenced, and a
SIGKILL or an outage can stop any write to PostgreSQL; the chaos run still
needs to know that the execution happened and when. Each worker process
appends one JSON line when a handler starts and one when it ends (or raises)
to ``<PROBE_JOURNAL_DIR>/executions-<pid>.jsonl``. A single ``write`` with
O_APPEND reaches the page cache before the next statement, so a killed process
loses nothing it journaled. The chaos run reads the files by their format
(scripts/chaoslib/journal.py).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

_files: dict[int, int] = {}


def enabled() -> bool:
    return bool(getattr(settings, "PROBE_JOURNAL_DIR", ""))


def _append(record: dict) -> None:
    pid = os.getpid()
    fd = _files.get(pid)
    if fd is None:
        path = os.path.join(settings.PROBE_JOURNAL_DIR, f"executions-{pid}.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _files[pid] = fd
    os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


def started(job_id: str, attempt: int, fence: int | None = None) -> str:
    """Journal the start of an execution (``fence``: its claim's token); returns its id."""
    execution = uuid.uuid4().hex
    if enabled():
        _append(
            {
                "event": "start",
                "execution": execution,
                "job": job_id,
                "attempt": attempt,
                "fence": fence,
                "pid": os.getpid(),
                "at": time.time(),
            }
        )
    return execution


def ended(execution: str, outcome: str) -> None:
    """Journal how an execution ended: "returned" or the name of what it raised."""
    if enabled():
        _append({"event": "end", "execution": execution, "outcome": outcome, "at": time.time()})


@contextmanager
def execution(job_id: str, attempt: int, fence: int | None = None) -> Iterator[str]:
    """Journal the start and the end of the block; yields the execution id."""
    execution_id = started(job_id, attempt, fence)
    try:
        yield execution_id
    except BaseException as exc:
        ended(execution_id, type(exc).__name__)
        raise
    ended(execution_id, "returned")
