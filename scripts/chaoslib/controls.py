"""The job controls the chaos run exercises: unique, keyed, snoozing and expiring jobs.

They go through the service layer like the other keyed submissions (an
idempotency key each, retried until acknowledged), planned from the seed:

- unique: a few submissions per unique key, spaced so that some arrive while
  the key's job is still live (the enqueue must answer with that job) and some
  after it ended (a new job takes the key);
- keyed: bursts of jobs sharing a few concurrency keys on the ``keyed`` queue,
  whose ``key_concurrency_limit`` is ``KEY_CONCURRENCY_LIMIT``;
- snoozing: ``probe.chaos_snooze`` snoozes once or twice, then completes;
- expiring: short ``expires_in``, some scheduled to start after it (these must
  expire), the others racing the workers (either end is right).
"""

from __future__ import annotations

import random

from chaoslib.clients import Spec

KEYED_QUEUE = "keyed"
KEY_CONCURRENCY_LIMIT = 2
CHANNEL = "service-controls"


def plan_controls(seed: int, count: int, *, window: float) -> list[Spec]:
    """54 specs per 400 planned jobs, spread over ``window`` seconds; a pure function of the
    seed. Refs start with "c"."""
    rng = random.Random(seed + 5)
    scale = max(1, round(count / 400))
    specs: list[Spec] = []

    def add(at: float, type_: str, payload: dict, **controls) -> None:
        index = len(specs)
        ref = f"c{index:06d}"
        specs.append(
            Spec(
                ref=ref,
                channel=CHANNEL,
                at=round(at, 3),
                type=type_,
                payload={"ref": ref, **payload},
                priority=rng.choice(["high", "medium", "low"]),
                queue=controls.pop("queue", "default"),
                delay=controls.pop("delay", None),
                max_attempts=rng.randint(8, 12),
                key=f"chaos-{seed}-{ref}",
                **controls,
            )
        )

    for number in range(4 * scale):
        # Three submissions of one key over up to 12 s; each job runs for up to 1.2 s.
        at = rng.uniform(0, window * 0.9)
        for _ in range(3):
            add(at, "probe.chaos", {"sleep": round(rng.uniform(0.3, 1.2), 3)}, unique_key=f"u{number}")
            at += rng.uniform(0.3, 6.0)
    for _ in range(2 * scale):
        # A burst over three keys: more of one key due at once than its limit lets run.
        at = rng.uniform(0, window * 0.9)
        for _ in range(10):
            add(
                at,
                rng.choice(["probe.chaos", "probe.chaos_plain"]),
                {"sleep": round(rng.uniform(0.2, 0.8), 3)},
                queue=KEYED_QUEUE,
                concurrency_key=f"k{rng.randrange(3)}",
            )
    for _ in range(10 * scale):
        add(
            rng.uniform(0, window),
            "probe.chaos_snooze",
            {"sleep": round(rng.uniform(0, 0.3), 3), "times": rng.randint(1, 2), "seconds": 0.3},
        )
    for number in range(12 * scale):
        at = rng.uniform(0, window)
        if number % 4 == 0:
            # Due after its expiry: no worker may start it.
            add(at, "probe.chaos_plain", {}, delay=3.0, expires_in=1.5, expected=("expired",))
        else:
            add(
                at,
                rng.choice(["probe.chaos", "probe.chaos_plain"]),
                {"sleep": round(rng.uniform(0, 0.3), 3)},
                expires_in=round(rng.uniform(0.3, 5.0), 2),
                expected=("completed", "expired"),
            )
    return sorted(specs, key=lambda spec: (spec.at, spec.ref))
