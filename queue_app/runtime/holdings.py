"""What a worker process holds: each claimed attempt, keyed by (job id, fence), until settled.

The main loop, the slot threads, the heartbeat thread and the cancel listener all
reach the same attempts through this object, under its lock. Keyed by the fence
as well as the id, a signal meant for one attempt (lease lost, cancel requested)
can never land on a later attempt of the same job run by this process.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from queue_app.conf import queue_settings
from queue_app.engine.execution import ClaimedJob, Completion
from queue_app.exceptions import AttemptStopped

if TYPE_CHECKING:
    from queue_app.reports import AttemptReports


@dataclass(eq=False)
class Attempt:
    """One claimed attempt of a job, from its claim until its outcome is written."""

    job: ClaimedJob
    # Why it must stop (LeaseLost or CancelRequested), once known; the first reason stays.
    stop: type[AttemptStopped] | None = None
    # Set while its handler runs: reaches the handler (a signal, a cancelled future).
    interrupt: Callable[[], None] | None = None
    # Its outcome is being written: the heartbeat no longer speaks for it.
    settling: bool = False
    # A slot thread's hard deadline (monotonic), which the supervisor enforces.
    hard_deadline: float | None = None
    # When it was last interrupted (monotonic): the heartbeat interrupts it again only a
    # while later, so a handler's own clean-up after the stop gets to run.
    interrupted_at: float = 0.0
    # A slot coroutine's future, while it runs.
    future: concurrent.futures.Future | None = None
    # Why a slot coroutine was cancelled by the worker itself (shutdown), if it was.
    cancelled_for: str = ""
    # Its handler's progress and log lines (queue_app.reports), from its first report.
    reports: AttemptReports | None = None
    # When its lease was last confirmed (monotonic, read before the statement that set it):
    # the lease runs at least LEASE_SECONDS from then, whatever this process went through.
    confirmed_at: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple[str, int]:
        return self.job.id, self.job.fence

    def request_stop(self, reason: type[AttemptStopped]) -> None:
        """Ask the attempt to stop; a running handler is interrupted at once."""
        if self.stop is None:
            self.stop = reason
        if self.interrupt is not None and not self.settling:
            self.interrupted_at = time.monotonic()
            self.interrupt()

    def lease_age(self) -> float:
        """Seconds since its lease was last confirmed."""
        return time.monotonic() - self.confirmed_at

    def stop_error(self) -> AttemptStopped:
        assert self.stop is not None
        return self.stop(f"job {self.job.id} attempt {self.job.attempt}: {self.stop.__name__}")


class Holdings:
    """The attempts this process has claimed and not settled, the ones of the current
    batch not started yet, and finished ones whose completion waits for the next claim."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._attempts: dict[tuple[str, int], Attempt] = {}
        self._unstarted: list[Attempt] = []
        self._completions: list[tuple[Attempt, Completion]] = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._attempts)

    # --- claimed and settled -------------------------------------------------

    def claimed(self, jobs: Iterable[ClaimedJob], *, asked_at: float | None = None) -> list[Attempt]:
        """Hold the jobs of a new claim (sent at ``asked_at``, monotonic); they become the
        unstarted batch."""
        attempts = [Attempt(job) for job in jobs]
        if asked_at is not None:
            for attempt in attempts:
                attempt.confirmed_at = asked_at
        with self._lock:
            for attempt in attempts:
                self._attempts[attempt.key] = attempt
            self._unstarted = list(attempts)
        return attempts

    def find(self, job_id: str, fence: int) -> Attempt | None:
        with self._lock:
            return self._attempts.get((job_id, fence))

    def of_job(self, job_id: str) -> list[Attempt]:
        with self._lock:
            return [attempt for key, attempt in self._attempts.items() if key[0] == job_id]

    def confirm(self, keys: Iterable[tuple[str, int]], asked_at: float) -> None:
        """PostgreSQL extended these attempts' leases by a statement sent at ``asked_at``."""
        with self._lock:
            for key in keys:
                attempt = self._attempts.get(key)
                if attempt is not None:
                    attempt.confirmed_at = max(attempt.confirmed_at, asked_at)

    def settled(self, attempt: Attempt) -> None:
        """The attempt's outcome is written (or given up on): no longer held."""
        with self._lock:
            self._attempts.pop(attempt.key, None)

    def leases(self) -> list[tuple[str, int]]:
        """(id, fence) of the attempts whose leases the heartbeat extends (not being settled)."""
        with self._lock:
            return [key for key, attempt in self._attempts.items() if not attempt.settling]

    def all(self) -> list[Attempt]:
        """Every held attempt, in claim order."""
        with self._lock:
            return list(self._attempts.values())

    def stopping(self) -> list[Attempt]:
        """Running attempts asked to stop and not settled yet: interrupted again until they end."""
        with self._lock:
            return [
                attempt
                for attempt in self._attempts.values()
                if attempt.stop is not None and attempt.interrupt is not None and not attempt.settling
            ]

    # --- the unstarted batch ---------------------------------------------------

    def next_unstarted(self) -> Attempt | None:
        with self._lock:
            return self._unstarted.pop(0) if self._unstarted else None

    def unstarted(self) -> list[Attempt]:
        with self._lock:
            return list(self._unstarted)

    def take_unstarted(self, which: Callable[[Attempt], bool] = lambda attempt: True) -> list[Attempt]:
        """Remove and return the unstarted attempts ``which`` picks (in claim order)."""
        with self._lock:
            taken = [attempt for attempt in self._unstarted if which(attempt)]
            self._unstarted = [attempt for attempt in self._unstarted if not which(attempt)]
            return taken

    def put_unstarted_back(self, attempts: list[Attempt]) -> None:
        """Attempts taken from the batch and not handed back after all: they run here."""
        with self._lock:
            self._unstarted = attempts + self._unstarted

    # --- completions waiting for the next claim's commit ---------------------------

    def add_completion(self, attempt: Attempt, completion: Completion) -> None:
        with self._lock:
            self._completions.append((attempt, completion))

    def completions(self) -> list[tuple[Attempt, Completion]]:
        with self._lock:
            return list(self._completions)

    def take_completions(self) -> list[tuple[Attempt, Completion]]:
        with self._lock:
            taken, self._completions = self._completions, []
            return taken

    def put_completions_back(self, pending: list[tuple[Attempt, Completion]]) -> None:
        with self._lock:
            self._completions = pending + self._completions

    def forget(self, written: list[tuple[Attempt, Completion]]) -> None:
        """After the commit that wrote them: those attempts are settled."""
        if not written:
            return
        done = {id(attempt) for attempt, _ in written}
        with self._lock:
            self._completions = [item for item in self._completions if id(item[0]) not in done]
            for attempt, _ in written:
                self._attempts.pop(attempt.key, None)


def lease_sure_seconds() -> float:
    """How long a confirmed lease is taken as held without asking PostgreSQL again before a
    start: a heartbeat, or less where a heartbeat is over half the lease."""
    return min(queue_settings().HEARTBEAT_SECONDS, lease_start_limit())


def lease_start_limit() -> float:
    """The oldest confirmation a handler may still be started on: it leaves a heartbeat's
    worth of lease. Past it, the process was stalled (a SIGSTOP, a store that hung) after
    its last check, and the job may have been rescued and run by another worker."""
    settings = queue_settings()
    return settings.LEASE_SECONDS - settings.HEARTBEAT_SECONDS
