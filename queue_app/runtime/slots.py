"""Slots: several I/O-bound jobs at once in one worker process.

A worker started with more than one slot runs handlers declared ``async def`` on
one event loop (its own thread) and sync handlers registered ``io_bound=True`` on
slot threads, up to N jobs at once. Other sync handlers still run in the main
thread, one at a time. Each slot job keeps what a main-thread job has:

- its own lease: it is in the worker's holdings, whose leases the heartbeat extends;
- its own fence: every completion, failure and hand-back is conditional on it;
- its own time limit. A coroutine is cancelled at its soft limit (``asyncio.timeout``)
  and the attempt fails as a timeout. A thread cannot be interrupted: past its soft
  limit ``check_time_limit()`` raises ``JobTimeLimitExceeded`` in the handler, and the
  supervisor, which is told every slot's hard deadline, kills the process when one
  passes (that job fails as a timeout, the others are handed back);
- its own stop: a coroutine asked to stop (cancel, lost lease) is cancelled; a thread
  meets the stop at its next ``check_time_limit()``, and its job stays cancelling until
  the thread returns.

Each runs through the executor (executor.py), as a main-thread job does.

On shutdown the running slots get ``SHUTDOWN_GRACE_SECONDS`` to finish; coroutines
still running are then cancelled and handed back, and the worker hands back the
jobs of threads still running before the process exits (the fence rejects their
late completion).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection

from queue_app.conf import queue_settings
from queue_app.exceptions import JobTimeLimitExceeded
from queue_app.handlers import HandlerSpec, _current_attempt, _current_job, _soft_deadline
from queue_app.observability.logs import get_logger
from queue_app.payloads import check_result
from queue_app.runtime.executor import Executor, HandedBack
from queue_app.runtime.holdings import Attempt

log = get_logger(__name__)

# After the grace period, how long cancelled coroutines get to hand their jobs back.
CANCEL_WAIT_SECONDS = 2.0


class _Exited(Exception):
    """Carries a coroutine's SystemExit or KeyboardInterrupt to its slot thread: asyncio
    re-raises those two out of the event loop, which would end it for every slot."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


class Slots:
    """Up to ``count`` jobs running beside the worker's main thread."""

    def __init__(
        self, *, executor: Executor, count: int, worker_id: str, on_change: Callable[[], None]
    ) -> None:
        self.executor = executor
        self.count = count
        self.worker_id = worker_id
        # Tells the supervisor the slots' hard deadlines (Worker.tell_supervisor).
        self.on_change = on_change
        self._running: dict[tuple[str, int], Attempt] = {}
        self._changed = threading.Condition()
        self._waiting: queue.SimpleQueue[tuple[Attempt, bool]] = queue.SimpleQueue()
        self.loop = asyncio.new_event_loop()
        # Daemon threads: a process past its shutdown grace exits without waiting for them.
        threading.Thread(target=self.loop.run_forever, name="slots event loop", daemon=True).start()
        for index in range(count):
            threading.Thread(target=self._serve, name=f"slot {index}", daemon=True).start()

    def free(self) -> int:
        with self._changed:
            return self.count - len(self._running)

    def wait_for_free(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: len(self._running) < self.count, timeout)

    def start(self, attempt: Attempt, *, late: bool) -> None:
        """Hand a claimed job to a free slot thread (the caller claimed no more than free())."""
        with self._changed:
            self._running[attempt.key] = attempt
        self._waiting.put((attempt, late))

    def deadlines(self) -> dict[str, tuple[int, float]]:
        """Running job id -> (fence, hard deadline): what the supervisor enforces."""
        with self._changed:
            return {
                attempt.job.id: (attempt.job.fence, attempt.hard_deadline)
                for attempt in self._running.values()
                if attempt.hard_deadline is not None
            }

    def wait_idle(self, timeout: float) -> bool:
        """True once no slot runs a job; False if one still does after ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._running, timeout)

    def drain(self, grace_seconds: float) -> None:
        """Let running jobs finish within the grace; then cancel coroutines still running
        (they hand their jobs back). Jobs of threads still running stay held."""
        with self._changed:
            if self._changed.wait_for(lambda: not self._running, grace_seconds):
                return
            running = list(self._running.values())
        log.warning(
            "slots_still_running_after_grace", worker=self.worker_id, jobs=sorted(a.job.id for a in running)
        )
        for attempt in running:
            if attempt.future is not None and attempt.interrupt is not None:
                attempt.cancelled_for = "worker shutdown grace period ended"
                attempt.interrupt()
        with self._changed:
            self._changed.wait_for(
                lambda: not any(a.future is not None for a in self._running.values()),
                CANCEL_WAIT_SECONDS,
            )

    # --- in a slot thread ---------------------------------------------------

    def _serve(self) -> None:
        while True:
            attempt, late = self._waiting.get()
            try:
                self.executor.run(attempt, SlotRunner(self), late=late)
            except Exception as exc:  # noqa: BLE001 - a store error while settling
                # Not settled: the job keeps its lease until the heartbeat stops vouching
                # for it (the executor let go of it); then the rescue counts the attempt.
                log.warning("slot_job_not_settled", job_id=attempt.job.id, error=str(exc)[:300])
            finally:
                # Back to the pool: N slot threads must not pin N connections.
                connection.close()
                with self._changed:
                    self._running.pop(attempt.key, None)
                    self._changed.notify_all()
                self.on_change()


class SlotRunner:
    """Runs a handler beside the main thread: a coroutine on the slots' event loop, a sync
    io-bound handler on the slot thread itself."""

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        self.limit = 0.0

    def begin(self, attempt: Attempt, limit: float) -> None:
        self.limit = limit
        with self.slots._changed:
            attempt.hard_deadline = time.monotonic() + limit + queue_settings().HARD_TIME_LIMIT_GRACE_SECONDS
        self.slots.on_change()

    def call(self, attempt: Attempt, spec: HandlerSpec, executor: Executor) -> Any:
        if not spec.is_async:
            # A thread cannot be interrupted: check_time_limit() meets the stop instead.
            return executor.call_sync(attempt, spec)
        soft_deadline = time.monotonic() + self.limit
        task: list[asyncio.Task] = []
        future = asyncio.run_coroutine_threadsafe(
            _run_coroutine(spec, attempt, self.limit, soft_deadline, task), self.slots.loop
        )
        attempt.future = future

        def cancel_task() -> None:
            # In the loop: the task is cancelled, and the future ends only when the coroutine
            # has (its clean-up run): the job is not settled while its handler still runs. A
            # task not started yet finds the stop when it starts.
            if task:
                task[0].cancel()

        attempt.interrupt = lambda: self.slots.loop.call_soon_threadsafe(cancel_task)
        try:
            result = future.result()
        except _Exited as exited:
            raise exited.original from None  # this job's failure
        except concurrent.futures.CancelledError:
            if attempt.cancelled_for and attempt.stop is None:
                raise HandedBack(attempt.cancelled_for) from None
            raise
        check_result(result)
        return result

    def end(self, attempt: Attempt) -> None:
        attempt.interrupt = None
        attempt.future = None


async def _run_coroutine(
    spec: HandlerSpec, attempt: Attempt, limit: float, soft_deadline: float, task: list
) -> Any:
    """Await the handler under its soft limit: past it, the coroutine is cancelled."""
    task.append(asyncio.current_task())
    if attempt.stop is not None or attempt.cancelled_for:
        raise asyncio.CancelledError()  # asked to stop before it started
    # This task runs in its own copy of the context: these values are its alone.
    _current_job.set(attempt.job)
    _current_attempt.set(attempt)
    _soft_deadline.set(soft_deadline)
    timeout = asyncio.timeout(limit)
    try:
        async with timeout:
            return await spec.func(dict(attempt.job.payload))
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Exited(exc) from exc
    except TimeoutError:
        if timeout.expired():
            raise JobTimeLimitExceeded(f"time limit exceeded after {limit:g} s; cancelled") from None
        raise
