"""The job a worker process is running, in memory it shares with its supervisor.

Written at every job start and end, so it must cost no system call: a pipe
message per job took a third of the no-op drain rate (two context switches per
job on a small machine). The supervisor reads it when it checks hard time
limits and when the child dies.
"""

from __future__ import annotations

import ctypes
import time
from multiprocessing.context import BaseContext

JOB_ID_BYTES = 36  # a UUID in its canonical text form


class _Record(ctypes.Structure):
    # sequence is odd while the child writes: a reader that sees it change reads again.
    _fields_ = [
        ("sequence", ctypes.c_uint64),
        ("job_id", ctypes.c_char * JOB_ID_BYTES),
        ("fence", ctypes.c_int64),
        ("hard_deadline", ctypes.c_double),
    ]


class RunningJob:
    """Made by the supervisor before it forks the child; the child writes, the supervisor reads."""

    def __init__(self, context: BaseContext) -> None:
        self._record = context.RawValue(_Record)

    def set(self, job_id: str | None, fence: int | None, hard_deadline: float | None) -> None:
        record = self._record
        record.sequence += 1
        record.job_id = (job_id or "").encode()
        record.fence = fence or 0
        record.hard_deadline = hard_deadline or 0.0
        record.sequence += 1

    def read(self) -> tuple[tuple[str, int] | None, float | None]:
        """(job id, fence) of the running job or None, and its hard deadline (monotonic).

        A child killed in the middle of a write leaves the record torn for good:
        after a few tries that reads as no job, so the job is handed back with
        the rest the child held (a death while starting a job is not the job's doing).
        """
        record = self._record
        for _ in range(100):
            before = record.sequence
            if before % 2 == 0:
                job_id, fence, deadline = record.job_id, record.fence, record.hard_deadline
                if record.sequence == before:
                    return ((job_id.decode(), fence) if job_id else None), (deadline or None)
            time.sleep(0.0001)
        return None, None
