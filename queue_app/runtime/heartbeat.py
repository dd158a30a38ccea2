"""The heartbeat: keeps a worker's leases, and its side-work off the job's way.

Two threads, so that a store that hangs for one cannot cost the other. The lease
thread (``Heartbeat``) extends, every ``HEARTBEAT_SECONDS``, the leases of the
attempts the process holds (on its own database connection, PostgreSQL only) and
learns which were asked to cancel or lost to a rescue; each of those is told to
stop, and told again while its handler runs on. The upkeep thread (``Upkeep``)
does, every ``TICK_SECONDS``, what must not wait for a long job and needs Redis:
acknowledging popped ids, releasing the unstarted rest of a batch, the queues'
maintenance when this process leads it (maintenance.py). A Redis that stops
answering (a partition, a socket timeout of 30 s) stalls only the upkeep: the
leases go on being extended, so no running job is rescued and run again for it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from django.db import connection

from queue_app import broker
from queue_app.conf import queue_settings
from queue_app.engine import execution
from queue_app.exceptions import CancelRequested, LeaseLost
from queue_app.observability.logs import get_logger
from queue_app.runtime.maintenance import Maintenance
from queue_app.runtime.outages import OutageGuard
from queue_app.states import Status

if TYPE_CHECKING:
    from queue_app.runtime.worker import Worker

log = get_logger(__name__)

TICK_SECONDS = 0.1
# How often an attempt asked to stop is interrupted again while its handler runs on
# (it caught the exception, or was inside code that could not be interrupted).
REINTERRUPT_SECONDS = 1.0


class Upkeep(threading.Thread):
    """The side-work that needs Redis (see the module's docstring), every TICK_SECONDS."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name=f"upkeep {worker.worker_id}", daemon=True)
        self.worker = worker
        self.maintenance = Maintenance(worker.queues, holder=worker.worker_id)
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopped.wait(TICK_SECONDS):
                try:
                    self.worker.producer.acknowledge_overdue()
                    self.worker.release_batch()
                except OutageGuard.errors as exc:
                    # What was not handed back keeps its lease; the heartbeat stops
                    # extending nothing it no longer holds, and the fence absorbs the rest.
                    log.warning("release_failed", worker=self.worker.worker_id, error=str(exc)[:300])
                    connection.close()
                try:
                    self.maintenance.tick(broker.get_client())
                    self.worker.background_upkeep()
                except OutageGuard.errors as exc:
                    # The main loop refreshes the controls once overdue (and meets the outage
                    # itself); maintenance leases not renewed lapse to another candidate.
                    log.debug("upkeep_failed", worker=self.worker.worker_id, error=str(exc)[:300])
                    connection.close()
        finally:
            self.maintenance.resign()
            connection.close()

    def stop(self, timeout: float) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=timeout)


class Heartbeat(threading.Thread):
    """The leases (see the module's docstring); starts and stops the upkeep thread with it."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name=f"heartbeat {worker.worker_id}", daemon=True)
        self.worker = worker
        self.holdings = worker.holdings
        self.interval = queue_settings().HEARTBEAT_SECONDS
        self.upkeep = Upkeep(worker)
        self._stopped = threading.Event()

    def start(self) -> None:
        super().start()
        self.upkeep.start()

    def run(self) -> None:
        next_beat = time.monotonic() + self.interval
        try:
            while not self._stopped.wait(TICK_SECONDS):
                self._interrupt_again()
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.interval
                    self.beat()
        finally:
            connection.close()

    def _interrupt_again(self) -> None:
        now = time.monotonic()
        for attempt in self.holdings.stopping():
            if now - attempt.interrupted_at >= REINTERRUPT_SECONDS:
                attempt.request_stop(attempt.stop)

    def beat(self) -> None:
        worker = self.worker
        held = self.holdings.leases()
        try:
            if held:
                asked = time.monotonic()
                statuses = execution.extend_leases(held, worker_id=worker.worker_id)
                self.holdings.confirm([key for key in held if key[0] in statuses], asked)
                self._tell_attempts(held, statuses)
            worker.settle_previous_incarnation()
        except OutageGuard.errors as exc:
            log.warning("heartbeat_failed", worker=worker.worker_id, error=str(exc)[:300])
            connection.close()

    def _tell_attempts(self, held: list[tuple[str, int]], statuses: dict[str, str]) -> None:
        lost = []
        for job_id, fence in held:
            attempt = self.holdings.find(job_id, fence)
            # Settled meanwhile (its outcome written since the snapshot): nothing to say.
            if attempt is None or attempt.settling:
                continue
            status = statuses.get(job_id)
            if status is None:
                lost.append(attempt)
                attempt.request_stop(LeaseLost)
            elif status == Status.CANCELLING:
                attempt.request_stop(CancelRequested)
        if lost:
            log.warning("lease_lost", worker=self.worker.worker_id, job_ids=sorted(a.job.id for a in lost))
            execution.note_leases_lost([attempt.key for attempt in lost if not attempt.settling])

    def stop(self) -> None:
        self._stopped.set()
        self.upkeep.stop(timeout=self.interval + 5)
        if self.is_alive():
            self.join(timeout=self.interval + 5)
