"""Applying the plan's faults to the running system, and undoing the ones that hold.

A killed process comes back after its hold (a worker sometimes under its old
name, so that its start-up recovery settles what the dead one held); a paused
one gets SIGCONT. Every applied fault is counted by kind and written to the
run's fault log with its wall-clock time.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import redis

from chaoslib.processes import Cast, Child
from chaoslib.schedule import STOP_EXIT_SECONDS as STOP_EXIT_SECONDS_IN_PLAN
from chaoslib.schedule import Fault, Kind

# How long a worker fault waits for some worker to hold a job before hitting an idle one.
BUSY_WAIT_SECONDS = 2.0
# A fault that finds no target (a process still down, Redis restarting) is tried again this
# often, this long apart, before it counts as skipped; the run requires a minimum per kind.
RETRIES_WHEN_SKIPPED = 3
RETRY_GAP_SECONDS = 1.0
# Faults that need a worker running a job try longer: they often come during a store outage,
# when no job runs, and they are the ones that put a stale attempt beside a new one.
RETRIES_WHEN_NO_JOB_RUNS = 12
# A stopped worker that has not exited this long after its SIGTERM (and SIGCONT) is SIGKILLed,
# which the run reports as an unclean stop.
STOP_TIMEOUT_SECONDS = 30.0


def _identity(child: Child) -> str:
    """The --name a runworker child runs under (its workers are <name>/<index>)."""
    return child.args[child.args.index("--name") + 1]


class Injector:
    """Runs the fault plan against the cast of processes and the stores."""

    def __init__(
        self,
        *,
        cast: Cast,
        stores,
        redis_client: Callable[[], redis.Redis],
        pick_ids: Callable[[], dict[str, list[str]]],
        busy_workers: Callable[[], set[str]],
        # (minimum sleep, stubborn only) -> {--name: (job id, fence)} of the jobs the workers run
        long_jobs: Callable[..., dict[str, tuple[str, int, float]]],
        reclaimed: Callable[[str, int], bool],
        seed: int,
        log_path: Path,
    ) -> None:
        self.cast = cast
        self.stores = stores
        self.redis_client = redis_client
        self.pick_ids = pick_ids
        self.busy_workers = busy_workers
        self.long_jobs = long_jobs
        self.reclaimed = reclaimed
        # Which stale ids to push, which busy worker to hit; the plan has its own stream.
        self.rng = random.Random(seed + 1)
        self.applied: Counter = Counter()
        self.skipped: Counter = Counter()
        # (kind, epoch seconds) of each applied fault: the report places them against the jobs.
        self.timeline: list[tuple[str, float]] = []
        self.last_action_at: float | None = None  # monotonic time of the last fault or undo
        self._log = open(log_path, "a")
        self._pending: list[tuple[float, int, Callable[[], str]]] = []
        self._sequence = itertools.count()
        self._renamed = Counter()

    # --- the timeline ---------------------------------------------------------------

    def schedule(self, at: float, action: Callable[[], str]) -> None:
        """Run ``action`` at monotonic time ``at``; it returns the line for the fault log."""
        heapq.heappush(self._pending, (at, next(self._sequence), action))

    def run(self, faults: list[Fault], *, started: float, idle: Callable[[], None]) -> None:
        """Apply every fault at its time (and each undo after its hold); ``idle`` runs between."""
        for fault in faults:
            self.schedule(started + fault.at, lambda fault=fault: self.apply(fault))
        while self._pending:
            at, _, action = self._pending[0]
            if time.monotonic() < at:
                idle()
                time.sleep(min(0.1, max(0.0, at - time.monotonic())))
                continue
            heapq.heappop(self._pending)
            line = action()
            self.last_action_at = time.monotonic()
            if line is not None:  # None: a poll that found nothing to do yet
                self._note(line)
        idle()

    def _note(self, line: str) -> None:
        self._log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        self._log.flush()

    def close(self) -> None:
        self._log.close()

    # --- faults ------------------------------------------------------------------------

    def apply(self, fault: Fault, tries_left: int | None = None) -> str:
        """Apply one fault; each kind's method returns what it did, or None if it found no target
        (then it is tried again a little later, and counted as skipped after the last try)."""
        if tries_left is None:
            needs_job = fault.kind in (Kind.PAUSE_UNTIL_RECLAIMED, Kind.STOP_WORKER_MID_JOB)
            tries_left = RETRIES_WHEN_NO_JOB_RUNS if needs_job else RETRIES_WHEN_SKIPPED
        done = getattr(self, f"_{fault.kind}")(fault)
        if done is None:
            if tries_left > 0:
                self.schedule(time.monotonic() + RETRY_GAP_SECONDS, lambda: self.apply(fault, tries_left - 1))
                return f"{fault.describe()}: no target yet, trying again in {RETRY_GAP_SECONDS:.0f} s"
            self.skipped[fault.kind] += 1
            return f"{fault.describe()}: skipped (target not running or unreachable)"
        self.applied[fault.kind] += 1
        self.timeline.append((str(fault.kind), time.time()))
        return f"{fault.describe()}: {done}"

    def _worker(self, fault: Fault) -> Child | None:
        """The planned worker, unless it holds no job and another running one does (a fault
        that finds a worker idle tests little); waits a moment for one to be busy."""
        workers = self.cast.by_role("worker")
        planned = workers[fault.target]
        deadline = time.monotonic() + BUSY_WAIT_SECONDS
        while True:
            running = [child for child in workers if child.alive and not child.paused and not child.down]
            identities = self.busy_workers()
            busy = [child for child in running if _identity(child) in identities]
            if planned in busy:
                return planned
            if busy:
                return self.rng.choice(busy)
            if time.monotonic() > deadline:
                return planned if planned in running else None
            self.cast.watch()
            time.sleep(0.1)

    def _later(self, hold: float, line: str, action: Callable[[], object]) -> None:
        def undo() -> str:
            action()
            return line

        self.schedule(time.monotonic() + hold, undo)

    def _kill_worker(self, fault: Fault) -> str | None:
        child = self._worker(fault)
        if child is None:
            return None
        killed = _identity(child)
        self.cast.kill(child)

        def restart() -> None:
            if not fault.same_name:
                # A new identity: what the dead one held waits for its lease to expire.
                self._renamed[child.name] += 1
                base = child.name.replace("worker-", "chaos-w")
                child.args[child.args.index("--name") + 1] = f"{base}-r{self._renamed[child.name]}"
            self.cast.start(child)

        under = "its old name" if fault.same_name else "a new name"
        self._later(fault.hold, f"restarted {child.name} under {under}", restart)
        return f"killed {child.name} ({killed})"

    def _kill_worker_process(self, fault: Fault) -> str | None:
        """The planned (or a busy) worker's process; when that worker is down, paused or
        restarting under another fault, a process of any other running worker."""
        chosen = self._worker(fault)
        others = [
            child
            for child in self.cast.by_role("worker")
            if child is not chosen and child.alive and not child.paused and not child.down
        ]
        for child in ([chosen] if chosen is not None else []) + others:
            pid = self.cast.kill_one_worker_process(child)
            if pid is not None:
                return f"killed process {pid} of {child.name}"
        return None

    def _pause_worker(self, fault: Fault) -> str | None:
        child = self._worker(fault)
        if child is None:
            return None
        self.cast.pause(child)
        self._later(fault.hold, f"resumed {child.name}", lambda: self.cast.resume(child))
        return f"paused {child.name}"

    def _long_job_target(
        self, *, stubborn_first: bool = False, or_any_job: bool = False
    ) -> tuple[Child, str, int] | None:
        """A running worker busy with a long job: (its child, the job id, the claim's fence).
        ``stubborn_first``: only a stubborn long job until the wait ends, then any long job;
        ``or_any_job``: when no long job runs by then, a worker running any job."""
        deadline = time.monotonic() + BUSY_WAIT_SECONDS
        while True:
            running = {
                _identity(c): c
                for c in self.cast.by_role("worker")
                if c.alive and not c.paused and not c.down
            }
            searches = [(0.5, stubborn_first)]
            if time.monotonic() > deadline:
                searches = [(0.5, False)] + ([(0.0, False)] if or_any_job else [])
            for min_sleep, stubborn in searches:
                # Claimed by the process running now: after a restart under the same name, the
                # dead incarnation's job still shows under it until the new one settles it.
                jobs = {
                    name: (job_id, fence)
                    for name, (job_id, fence, claimed) in self.long_jobs(min_sleep, stubborn).items()
                    if name in running and claimed > running[name].started_at
                }
                if jobs:
                    identity = self.rng.choice(sorted(jobs))
                    return running[identity], *jobs[identity]
            if time.monotonic() > deadline:
                return None
            self.cast.watch()
            time.sleep(0.05)

    def _resume_when_reclaimed(self, child: Child, job_id: str, fence: int, hold: float, then=None) -> None:
        """Poll until another claim of the job holds it (or ``hold`` ran out), then SIGCONT the
        child and run ``then``."""
        give_up = time.monotonic() + hold

        def poll() -> str | None:
            taken = self.reclaimed(job_id, fence)
            if taken or time.monotonic() > give_up:
                self.cast.resume(child)
                if then is not None:
                    then()
                how = "reclaimed" if taken else "not reclaimed in time"
                return f"resumed {child.name} ({job_id} fence {fence} {how})"
            self.schedule(time.monotonic() + 0.05, poll)
            return None

        self.schedule(time.monotonic() + 0.05, poll)

    def _pause_until_reclaimed(self, fault: Fault) -> str | None:
        """Pause a worker running a long job; resume it as soon as another worker has claimed
        that job (or the hold ran out), so the stale attempt wakes while the next one runs."""
        others = [c for c in self.cast.by_role("worker") if c.alive and not c.paused and not c.down]
        if len(others) < 2:
            return None  # no other worker would be left to claim the job again
        target = self._long_job_target(stubborn_first=True)
        if target is None:
            return None
        child, job_id, fence = target
        self.cast.pause(child)
        self._resume_when_reclaimed(child, job_id, fence, fault.hold)
        return f"paused {child.name} running {job_id} fence {fence}"

    def _stop_worker_mid_job(self, fault: Fault) -> str | None:
        """SIGTERM a worker running a long job: it hands back what it has not started and must
        exit 0; then it starts again under its name. With ``then_pause`` it is SIGSTOPped
        right after the SIGTERM until another worker claims its running job."""
        target = self._long_job_target(or_any_job=True)
        if target is None:
            return None
        child, job_id, fence = target
        self.cast.terminate(child)
        if fault.then_pause:
            time.sleep(0.2)  # let the worker take the SIGTERM (and start its shutdown) first
            self.cast.pause(child)
            hold = fault.hold - STOP_EXIT_SECONDS_IN_PLAN
            self._resume_when_reclaimed(
                child, job_id, fence, hold, then=lambda: self._restart_after_exit(child)
            )
        else:
            self._restart_after_exit(child)
        paused = ", then paused" if fault.then_pause else ""
        return f"stopped {child.name} (SIGTERM{paused}) running {job_id} fence {fence}"

    def _restart_after_exit(self, child: Child) -> None:
        """Once the stopped child has exited, record its exit code and start it again."""
        give_up = time.monotonic() + STOP_TIMEOUT_SECONDS

        def poll() -> str | None:
            if child.process.poll() is None and time.monotonic() < give_up:
                self.schedule(time.monotonic() + 0.1, poll)
                return None
            code = self.cast.reap(child)
            self.cast.start(child)
            return f"{child.name} exited with {code} after its stop; started again"

        self.schedule(time.monotonic() + 0.1, poll)

    def _kill_relay(self, fault: Fault) -> str | None:
        return self._kill_and_restart(self.cast.by_role("relay")[fault.target], fault.hold)

    def _kill_reconciler(self, fault: Fault) -> str | None:
        return self._kill_and_restart(self.cast.by_role("reconciler")[0], fault.hold)

    def _kill_and_restart(self, child: Child, hold: float) -> str | None:
        if not child.alive:
            return None
        self.cast.kill(child)
        self._later(hold, f"restarted {child.name}", lambda: self.cast.start(child))
        return f"killed {child.name}"

    def _flush_redis(self, fault: Fault) -> str | None:
        return "flushed" if self._with_redis(lambda client: client.flushdb()) else None

    def _restart_redis(self, fault: Fault) -> str:
        self.stores.stop_redis()
        self._later(fault.hold, "started Redis (empty)", self.stores.start_redis)
        return "stopped Redis"

    def _restart_postgres(self, fault: Fault) -> str:
        self.stores.stop_postgres()
        self._later(fault.hold, "started PostgreSQL", self.stores.start_postgres)
        return "stopped PostgreSQL"

    def _push_stale_ids(self, fault: Fault) -> str | None:
        """Ids a worker must not run (again): queued ones twice, finished ones, workflow steps
        still waiting for their dependencies, and unknown ones."""
        from queue_app import broker

        ids = self.pick_ids()
        rng = self.rng
        queued = rng.sample(ids["queued"], min(10, len(ids["queued"])))
        finished = rng.sample(ids["finished"], min(10, len(ids["finished"])))
        waiting = rng.sample(ids.get("waiting", []), min(5, len(ids.get("waiting", []))))
        unknown = ["not-a-job-id", "00000000-0000-4000-8000-000000000000"]
        now = time.time()
        intents = []
        for job_id in queued + finished + waiting + unknown:
            queue, fifo = rng.choice([("default", False), ("bulk", True)])
            place = rng.random()
            if place < 0.7:
                score = broker.ready_score(rng.randint(-100, 100))
                member = broker.ready_member(job_id, datetime.fromtimestamp(now, UTC))
                intents.append(broker.Intent("enqueue", job_id, queue, fifo, score, member))
            else:
                # Already due in the retry set: a worker's promotion moves it, then the claim drops it.
                intents.append(broker.Intent("schedule", job_id, queue, fifo, now - 1))
        if not self._with_redis(lambda client: broker.apply(client, intents)):
            return None
        return (
            f"pushed {len(queued)} queued, {len(finished)} finished, {len(waiting)} waiting"
            f" and {len(unknown)} unknown ids"
        )

    def _with_redis(self, action: Callable[[redis.Redis], object]) -> bool:
        """Apply ``action``; False when Redis stays down for a second (e.g. a restart fault's
        hold): the fault is skipped rather than blocking the scheduler that restarts Redis."""
        for _ in range(10):
            try:
                action(self.redis_client())
                return True
            except (redis.RedisError, OSError):
                time.sleep(0.1)
        return False
