"""The fault plan: which fault, when, against which process; a pure function of the seed.

The same seed and options always give the same plan (``--plan`` prints it),
so a failing run can be replayed fault for fault. What the processes do in
between still depends on timing, and so do the kills of the relays'
``relay.after_push`` failpoint, which draws its own random numbers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    KILL_WORKER = "kill_worker"  # SIGKILL a runworker and its forked workers; restart it later
    KILL_WORKER_PROCESS = "kill_worker_process"  # SIGKILL one forked worker; its supervisor restarts it
    PAUSE_WORKER = "pause_worker"  # SIGSTOP a runworker past its lease, then SIGCONT
    # SIGSTOP a runworker running a long job until another worker claims that job, then SIGCONT:
    # the paused attempt wakes up while the next one runs, and its completion must be fenced.
    PAUSE_UNTIL_RECLAIMED = "pause_until_reclaimed"
    # SIGTERM a runworker running a long job: it hands back what it has not started (another
    # worker claims it, the fence goes up) and must exit 0. With ``then_pause`` it is also
    # SIGSTOPped until another worker has claimed its running job: when it resumes, its
    # shutdown's hand-back or completion of that job is stale and must be fenced.
    STOP_WORKER_MID_JOB = "stop_worker_mid_job"
    KILL_RELAY = "kill_relay"
    KILL_RECONCILER = "kill_reconciler"
    FLUSH_REDIS = "flush_redis"  # FLUSHDB: every queued id is gone
    RESTART_REDIS = "restart_redis"  # kill the server, start an empty one after a hold
    RESTART_POSTGRES = "restart_postgres"  # pg_ctl stop -m fast, start after a hold: connections cut
    PUSH_STALE_IDS = "push_stale_ids"  # duplicates of queued ids, finished ids, unknown ids


RESTART_KINDS = frozenset({Kind.RESTART_REDIS, Kind.RESTART_POSTGRES})
WORKER_KINDS = frozenset(
    {
        Kind.KILL_WORKER,
        Kind.KILL_WORKER_PROCESS,
        Kind.PAUSE_WORKER,
        Kind.PAUSE_UNTIL_RECLAIMED,
        Kind.STOP_WORKER_MID_JOB,
    }
)

# Relative frequency after every kind has had its first turn.
WEIGHTS = {
    Kind.KILL_WORKER: 4,
    Kind.KILL_WORKER_PROCESS: 3,
    Kind.PAUSE_WORKER: 3,
    Kind.PAUSE_UNTIL_RECLAIMED: 3,
    Kind.STOP_WORKER_MID_JOB: 3,
    Kind.KILL_RELAY: 3,
    Kind.KILL_RECONCILER: 1,
    Kind.FLUSH_REDIS: 2,
    Kind.RESTART_REDIS: 2,
    Kind.RESTART_POSTGRES: 2,
    Kind.PUSH_STALE_IDS: 3,
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the fault phase began
    kind: Kind
    target: int | None = None  # index of the worker or relay
    hold: float = 0.0  # seconds down (killed) or paused before the restart or SIGCONT
    same_name: bool = False  # a killed worker comes back under its old name: start-up recovery
    then_pause: bool = False  # a stopped worker is also paused until its job is claimed again

    def describe(self) -> str:
        parts = [f"{self.at:7.2f}s {self.kind}"]
        if self.target is not None:
            parts.append(f"#{self.target}")
        if self.hold:
            parts.append(f"for {self.hold:.1f}s")
        if self.kind == Kind.KILL_WORKER:
            parts.append("back under the same name" if self.same_name else "back under a new name")
        if self.kind == Kind.STOP_WORKER_MID_JOB and self.then_pause:
            parts.append("then paused until its job is claimed again")
        return " ".join(parts)


# How long past the lease a pause_until_reclaimed waits for the job's next claim.
RECLAIM_WAIT_SECONDS = 8.0
# How long a stopped worker usually takes to exit and come back (its shutdown grace is 5 s).
STOP_EXIT_SECONDS = 8.0

# The store a fault needs up (and, for a restart, takes down for its hold).
NEEDS_STORE = {
    Kind.FLUSH_REDIS: "redis",
    Kind.RESTART_REDIS: "redis",
    Kind.PUSH_STALE_IDS: "redis",
    Kind.RESTART_POSTGRES: "postgres",
}


def plan(
    seed: int,
    *,
    duration: float,
    mean_gap: float,
    workers: int,
    relays: int,
    lease_seconds: float,
    restarts: bool,
) -> list[Fault]:
    """Faults spread over ``duration`` seconds, every kind at least once, none on a process
    or a store that an earlier fault still holds down or paused (a store fault waits for it)."""
    rng = random.Random(seed)
    kinds = [kind for kind in Kind if restarts or kind not in RESTART_KINDS]
    count = max(len(kinds), round(duration / mean_gap))
    sequence = list(kinds) + rng.choices(kinds, [WEIGHTS[k] for k in kinds], k=count - len(kinds))
    rng.shuffle(sequence)
    # Leave the last part of the window for the last holds to end inside it.
    times = sorted(rng.uniform(1.0, duration * 0.85) for _ in sequence)
    busy_until: dict[tuple[str, int], float] = {}
    faults = []
    for at, kind in zip(times, sequence, strict=True):
        role, size = ("relay", relays) if kind == Kind.KILL_RELAY else ("worker", workers)
        target = None
        if kind in WORKER_KINDS or kind == Kind.KILL_RELAY:
            free = [i for i in range(size) if busy_until.get((role, i), 0.0) <= at]
            if not free:
                kind = Kind.PUSH_STALE_IDS  # every candidate is down or paused: disturb Redis instead
            else:
                target = rng.choice(free)
        store = NEEDS_STORE.get(kind)
        if store is not None:
            at = max(at, busy_until.get((store, 0), 0.0))
        hold, same_name, then_pause = 0.0, False, False
        if kind == Kind.PAUSE_WORKER:
            hold = lease_seconds + rng.uniform(1.5, 3.0)
        elif kind == Kind.PAUSE_UNTIL_RECLAIMED:
            hold = lease_seconds + RECLAIM_WAIT_SECONDS  # the longest it waits; usually far less
        elif kind == Kind.KILL_WORKER:
            hold, same_name = rng.uniform(0.5, 3.0), rng.random() < 0.6
        elif kind == Kind.STOP_WORKER_MID_JOB:
            then_pause = rng.random() < 0.5
            # The longest it can take: the pause, then the exit; usually far less.
            hold = (lease_seconds + RECLAIM_WAIT_SECONDS if then_pause else 0.0) + STOP_EXIT_SECONDS
        elif kind in (Kind.KILL_RELAY, Kind.KILL_RECONCILER):
            hold = rng.uniform(0.2, 2.0)
        elif kind in RESTART_KINDS:
            hold = rng.uniform(0.5, 4.0)
        if target is not None:
            busy_until[(role, target)] = at + hold + 0.5
        if store is not None:
            busy_until[(store, 0)] = max(busy_until.get((store, 0), 0.0), at + hold + 0.5)
        faults.append(
            Fault(
                at=round(at, 2),
                kind=kind,
                target=target,
                hold=round(hold, 2),
                same_name=same_name,
                then_pause=then_pause,
            )
        )
    return sorted(faults, key=lambda fault: fault.at)
