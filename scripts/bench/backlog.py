"""A backlog after an outage: N jobs bulk enqueued, Redis lost, rebuilt, then drained.

    ./dev bench --backlog 1000000        (or: python backlog.py <jobs>, from scripts/bench)

In database ``bench_backlog`` and Redis database 12 (both emptied): enqueues N no-op jobs
through ``enqueue_jobs`` in calls of 1,000, relays them, reads Redis's memory per queued
id, empties Redis and times ``reconcile_queue`` rebuilding it (wall time and peak RSS,
as reconcile.py does), then starts ``runworker --concurrency=2`` and drains the whole
backlog. From the journal of starts it reports the drain rate over the first and the
last 10 % of the backlog: a queue whose claims slow down as the backlog's table and
index churn shows it there. Its Goals block judges: last/first >= 0.85, reconcile under
60 s and 256 MiB.
"""

from __future__ import annotations

import json
import os
import sys
import time

from common import BENCH_DIR, ROOT, python, read_journal, reset_journal, spawn, stop_all, wait_until

DRIFT_GOAL = 0.85
RECONCILE_GOALS = {"reconcile_s": 60.0, "reconcile_rss_mib": 256.0}


def environment() -> dict[str, str]:
    from ours import environment as ours_environment

    own = {"BENCH_OURS_DATABASE": "bench_backlog", "BENCH_OURS_REDIS_DB": "12"}
    os.environ.update(own)
    return {**ours_environment(), **own}


def decile_rates(starts: list[int]) -> tuple[float, float]:
    """Jobs per second over the first and the last tenth of the starts (µs, any order)."""
    starts = sorted(starts)
    tenth = max(2, len(starts) // 10)
    first, last = starts[:tenth], starts[-tenth:]
    return (tenth - 1) / ((first[-1] - first[0]) / 1e6), (tenth - 1) / ((last[-1] - last[0]) / 1e6)


def measure(n: int) -> dict:
    env = environment()
    from ours import reset_stores, setup_django

    setup_django(env)
    from django.db import connection
    from reconcile import redis_total, run_reconciler

    from queue_app import broker
    from queue_app.runtime.relay import Relay
    from queue_app.services import JobRequest, enqueue_jobs

    reset_stores()
    reset_journal()
    client = broker.get_client()
    baseline_memory = client.info("memory")["used_memory"]
    figures: dict = {"backlog_jobs": n}

    started = time.perf_counter()
    for first in range(0, n, 1000):
        enqueue_jobs(
            [JobRequest(type="bench.noop", payload={"n": arg}) for arg in range(first, min(n, first + 1000))]
        )
        if first % 100_000 == 0 and first:
            print(f"    enqueued {first:,}", file=sys.stderr, flush=True)
    figures["backlog_enqueue"] = n / (time.perf_counter() - started)
    with connection.cursor() as cursor:
        # Rows of ids the enqueuer pushed itself wait out RELAY_GRACE_SECONDS (ours.after_enqueue).
        cursor.execute("SELECT extract(epoch FROM max(dispatch_after) - now()) FROM queue_app_job_outbox")
        time.sleep(max(0.0, float(cursor.fetchone()[0] or 0)))
    started = time.perf_counter()
    Relay(batch_size=1000).drain()
    figures["backlog_relay"] = n / (time.perf_counter() - started)
    if redis_total(client) != n:
        raise SystemExit(f"Redis holds {redis_total(client):,} ids after the relay, expected {n:,}")
    figures["redis_bytes_per_id"] = (client.info("memory")["used_memory"] - baseline_memory) / n

    client.flushdb()
    # The outage outlasted the grace that spares ids a relay or enqueuer may still be pushing.
    outage = {**env, "JOBQUEUE_RECONCILE_GRACE_SECONDS": "0.001"}
    figures["reconcile_s"], figures["reconcile_rss_mib"], _ = run_reconciler(outage)
    if redis_total(client) != n:
        raise SystemExit(f"Redis holds {redis_total(client):,} ids after reconciling, expected {n:,}")

    workers = [
        spawn([python(), str(ROOT / "manage.py"), "runworker", "--concurrency=2"], env, "backlog-worker")
    ]
    try:
        with connection.cursor() as cursor:

            def done() -> bool:
                # Two probes of partial indexes, not a count of the completed jobs: polled
                # while the drain runs, a count would cost more the further it got, and
                # slow the very figures it waits for.
                cursor.execute(
                    "SELECT NOT EXISTS (SELECT FROM queue_app_jobs WHERE status = 'queued')"
                    "   AND NOT EXISTS (SELECT FROM queue_app_jobs"
                    "                    WHERE status IN ('processing', 'cancelling'))"
                )
                return cursor.fetchone()[0]

            wait_until(done, timeout=max(600.0, n / 100), what=f"{n:,} backlog jobs done", every=0.5)
            cursor.execute("SELECT count(*) FROM queue_app_jobs WHERE status = 'completed'")
            if cursor.fetchone()[0] != n:
                raise SystemExit(f"the drain ended with jobs not completed (of {n:,})")
    finally:
        stop_all(workers)
    starts = read_journal()
    if len(starts) != n:
        raise SystemExit(f"{len(starts):,} of {n:,} backlog jobs started")
    figures["drain_first_tenth"], figures["drain_last_tenth"] = decile_rates(list(starts.values()))
    figures["drain_last_over_first"] = figures["drain_last_tenth"] / figures["drain_first_tenth"]
    return figures


def backlog_goals(figures: dict) -> list[dict]:
    goals = [
        {
            "goal": f"drain rate over the last 10 % >= {DRIFT_GOAL}x the first 10 %",
            "value": figures["drain_last_over_first"],
            "met": figures["drain_last_over_first"] >= DRIFT_GOAL,
        }
    ]
    for key, limit in RECONCILE_GOALS.items():
        goals.append({"goal": f"{key} < {limit:.0f}", "value": figures[key], "met": figures[key] < limit})
    return goals


def run(n: int, run_child, out_dir, env: dict) -> int:
    """Measure in a child process; print the figures and the Goals; write JSON."""
    print(f"  backlog of {n:,} jobs ...", file=sys.stderr, flush=True)
    result = run_child("backlog.py", str(n), env=env)
    if "error" in result:
        print(f"FAILED backlog: {result['error']}")
        return 1
    result["goals"] = backlog_goals(result)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "backlog.json").write_text(json.dumps(result, indent=2))
    labels = {
        "backlog_enqueue": "bulk enqueue, 1,000 per call (jobs/s)",
        "backlog_relay": "relay (jobs/s)",
        "redis_bytes_per_id": "Redis memory per queued id (bytes)",
        "reconcile_s": "reconcile after a Redis flush (s)",
        "reconcile_rss_mib": "reconcile peak RSS (MiB)",
        "drain_first_tenth": "drain, 2 processes, first 10 % (jobs/s)",
        "drain_last_tenth": "drain, 2 processes, last 10 % (jobs/s)",
    }
    print(f"backlog of {n:,} queued jobs")
    for key, label in labels.items():
        print(f"  {label:<44} {result[key]:>12,.1f}")
    print("\nGoals")
    for goal in result["goals"]:
        print(f"  {'met' if goal['met'] else 'NOT MET':<8} {goal['goal']}: {goal['value']:.2f}")
    print(f"\nJSON: {out_dir / 'backlog.json'}")
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(BENCH_DIR), str(ROOT)]
    print(json.dumps(measure(int(sys.argv[1]))))
