"""Soak: hours of mixed load, sampled every 30 s, to show that no figure drifts.

    ./dev soak                   two hours (the figures the goals are judged on)
    ./dev soak --minutes 10      the short form, for checking the soak itself
    ./dev soak --judge artifacts/soak/samples.json    the Goals of a run's samples again

Runs this project's relay, a worker (``runworker --queues=default --concurrency=2``), a
worker for the slow jobs' queue (``--queues=slow --concurrency=3``) and the reconciler
(``reconcile_queue --loop``) on the database ``bench_soak`` and Redis database 13 (both
emptied first), and enqueues ``--rate`` jobs per second for ``--minutes``: mostly no-ops,
with jobs that fail once then succeed, fail every attempt, run slowly, start later, or
are cancelled before they start. Retention is on: finished jobs older than
``--retention-minutes`` (default a fifth of the run, at most 5) are pruned every minute
(``prune_jobs``), dispatched outbox rows by the relay. Every 30 s it samples throughput,
enqueue-to-start p50/p99 of the no-ops, the queued backlog, each queue table's and its
indexes' size, dead tuples and autovacuum runs, each process's RSS and Redis's memory.
It writes ``samples.json``, one PNG per figure and its Goals (artifacts/soak/): after
the warm-up, no trend in throughput beyond noise, RSS flat, table size bounded by the
retention, and p99 over the last window within 1.25x of the first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from autovacuum import autovacuum_on
from common import BENCH_DIR, ROOT, python, spawn, stop_all

SAMPLE_SECONDS = 30.0
TABLES = ("queue_app_jobs", "queue_app_job_logs", "queue_app_job_outbox")
# What the load is made of: kind -> share of the arrivals.
MIX = {"noop": 0.75, "flaky": 0.06, "failing": 0.03, "slow": 0.05, "scheduled": 0.06, "cancelled": 0.05}
RSS_GOAL, TABLE_GOAL, P99_GOAL, TREND_GOAL = 1.10, 1.25, 1.25, 0.05


def environment(retention_minutes: float, redis_db: int) -> dict[str, str]:
    from ours import environment as ours_environment

    own = {"BENCH_OURS_DATABASE": "bench_soak", "BENCH_OURS_REDIS_DB": str(redis_db)}
    os.environ.update(own)
    return {
        **ours_environment(),
        **own,
        "JOBQUEUE_OUTBOX_RETENTION_SECONDS": str(retention_minutes * 60),
        # Slow jobs have a queue of their own, as a production deployment would give them: on
        # the no-ops' queue a no-op waits behind them, and p99 measures the mix, not the queue.
        "JOBQUEUE_QUEUES": "default,slow",
    }


class Load(threading.Thread):
    """Enqueues at a steady rate until stopped; cancels its to-be-cancelled jobs a few seconds on."""

    def __init__(self, rate: float) -> None:
        super().__init__(daemon=True)
        self.rate, self.stopping, self.sent = rate, threading.Event(), 0
        # Jobs meant to be cancelled that had already finished: their start came first (a
        # stall of this process, or of the whole machine, can let it).
        self.finished_before_cancel = 0
        self._random = random.Random(64)

    def run(self) -> None:
        from django.db import connection
        from django.utils import timezone

        from queue_app.exceptions import TransitionNotAllowed
        from queue_app.services import cancel_job, enqueue_job

        kinds, weights = list(MIX), list(MIX.values())
        to_cancel: list[tuple[float, str]] = []
        started = time.monotonic()
        while not self.stopping.is_set():
            delay = started + self.sent / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            kind = self._random.choices(kinds, weights)[0]
            payload: dict = {"kind": kind}
            run_at, queue = None, "default"
            if kind == "slow":
                payload["seconds"], queue = self._random.uniform(0.2, 1.0), "slow"
            elif kind in ("scheduled", "cancelled"):
                run_at = timezone.now() + timedelta(seconds=self._random.uniform(20, 90))
            job = enqueue_job("bench.soak", payload, queue=queue, run_at=run_at)
            if kind == "cancelled":
                to_cancel.append((time.monotonic() + self._random.uniform(1, 10), str(job.id)))
            while to_cancel and to_cancel[0][0] <= time.monotonic():
                try:
                    cancel_job(to_cancel.pop(0)[1], reason="soak")
                except TransitionNotAllowed:
                    self.finished_before_cancel += 1
            self.sent += 1
        connection.close()


def _rss_kib(pid: int) -> int:
    """Resident memory of a process and every process under it (the worker forks its own)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        pending.extend(int(child) for child in children)
    return total


def sample(cursor, client, processes: dict[str, subprocess.Popen], since: float) -> dict:
    """One row of figures for the window since ``since`` (epoch seconds)."""
    row: dict = {"t": time.time()}
    cursor.execute(
        "SELECT count(*) FILTER (WHERE status = 'completed' AND completed_at > to_timestamp(%(since)s)),"
        "       count(*) FILTER (WHERE status = 'queued' AND next_retry_at IS NULL)"
        "  FROM queue_app_jobs",
        {"since": since},
    )
    completed, row["queued_ready"] = cursor.fetchone()
    row["throughput"] = completed / (row["t"] - since)
    cursor.execute(
        "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP"
        "       (ORDER BY extract(epoch FROM started_at - created_at) * 1000)"
        "  FROM queue_app_jobs WHERE started_at > to_timestamp(%(since)s) AND payload->>'kind' = 'noop'",
        {"since": since},
    )
    latencies = cursor.fetchone()[0] or [None, None]
    row["latency_p50_ms"], row["latency_p99_ms"] = latencies
    cursor.execute(
        "SELECT relname, pg_table_size(relid), pg_indexes_size(relid), n_live_tup, n_dead_tup,"
        "       autovacuum_count, autoanalyze_count, n_tup_upd, n_tup_hot_upd"
        "  FROM pg_stat_user_tables WHERE relname = ANY(%(tables)s)",
        {"tables": list(TABLES)},
    )
    for name, table, indexes, live, dead, vacuums, analyzes, updates, hot in cursor.fetchall():
        row[f"{name}_table_mib"], row[f"{name}_indexes_mib"] = table / 2**20, indexes / 2**20
        row[f"{name}_live"], row[f"{name}_dead"] = live, dead
        row[f"{name}_autovacuums"], row[f"{name}_autoanalyzes"] = vacuums, analyzes
        # Updates so far, and how many were HOT (no index entry written): what fillfactor tunes.
        row[f"{name}_updates"], row[f"{name}_hot_updates"] = updates, hot
    row["tables_total_mib"] = sum(
        row[f"{name}_{part}_mib"] for name in TABLES for part in ("table", "indexes")
    )
    for kind, process in processes.items():
        row[f"rss_{kind}_mib"] = _rss_kib(process.pid) / 1024
    # The server's memory carries any other database's keys; the key count is the soak's own.
    row["redis_used_mib"] = client.info("memory")["used_memory"] / 2**20
    row["redis_keys"] = client.dbsize()
    return row


def prune(env: dict[str, str], retention_minutes: float) -> float:
    """Runs ``prune_jobs`` once; returns its seconds, to show whether pruning keeps up."""
    days = retention_minutes / (24 * 60)
    started = time.monotonic()
    subprocess.run(
        [python(), str(ROOT / "manage.py"), "prune_jobs", f"--min-age-days={days}"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.monotonic() - started


def windows(samples: list[dict], duration: float) -> tuple[list[dict], list[dict], list[dict]]:
    """(after warm-up, first window, last window): warm-up and windows scale down with short runs."""
    start = samples[0]["t"]
    warm_up, window = min(600.0, 0.2 * duration), min(600.0, 0.25 * duration)
    steady = [row for row in samples if row["t"] - start >= warm_up]
    first = [row for row in steady if row["t"] - steady[0]["t"] < window]
    last = [row for row in steady if steady[-1]["t"] - row["t"] < window]
    return steady, first, last


def trend(rows: list[dict], key: str) -> tuple[float, float]:
    """(change over the rows' span relative to the mean, its standard error) of a linear fit."""
    points = [(row["t"], row[key]) for row in rows if row.get(key) is not None]
    if len(points) < 3:
        return 0.0, float("inf")
    ts, ys = zip(*points, strict=True)
    mean_t, mean_y = statistics.fmean(ts), statistics.fmean(ys)
    sxx = sum((t - mean_t) ** 2 for t in ts)
    slope = sum((t - mean_t) * (y - mean_y) for t, y in points) / sxx
    residuals = [y - (mean_y + slope * (t - mean_t)) for t, y in points]
    error = (sum(r * r for r in residuals) / (len(points) - 2) / sxx) ** 0.5
    span = ts[-1] - ts[0]
    return slope * span / mean_y, error * span / mean_y


def soak_goals(samples: list[dict], duration: float, kinds: list[str]) -> list[dict]:
    steady, first, last = windows(samples, duration)

    def mean(rows: list[dict], key: str) -> float:
        return statistics.fmean(row[key] for row in rows if row.get(key) is not None)

    goals = []
    drift, error = trend(steady, "throughput")
    goals.append(
        {
            "goal": f"throughput trend within noise (|drift| <= max({TREND_GOAL:.0%}, 2 standard errors))",
            "value": drift,
            "met": abs(drift) <= max(TREND_GOAL, 2 * error),
        }
    )
    for kind in kinds:
        key = f"rss_{kind}_mib"
        value = mean(last, key) / mean(first, key)
        goals.append(
            {"goal": f"{kind} RSS last/first window <= {RSS_GOAL}", "value": value, "met": value <= RSS_GOAL}
        )
    value = max(row["tables_total_mib"] for row in last) / max(row["tables_total_mib"] for row in first)
    goals.append(
        {
            "goal": f"tables + indexes, last/first window peak <= {TABLE_GOAL}",
            "value": value,
            "met": value <= TABLE_GOAL,
        }
    )
    value = mean(last, "latency_p99_ms") / mean(first, "latency_p99_ms")
    goals.append(
        {
            "goal": f"p99 start latency last/first window <= {P99_GOAL}",
            "value": value,
            "met": value <= P99_GOAL,
        }
    )
    return goals


PLOTS = {
    "throughput": ["throughput"],
    "start_latency_ms": ["latency_p50_ms", "latency_p99_ms"],
    "backlog": ["queued_ready"],
    "tables_mib": [f"{name}_{part}_mib" for name in TABLES for part in ("table", "indexes")],
    "dead_tuples": [f"{name}_dead" for name in TABLES],
    "autovacuum_runs": [f"{name}_autovacuums" for name in TABLES],
    "redis_mib": ["redis_used_mib"],
    "redis_keys": ["redis_keys"],
    "prune_seconds": ["prune_seconds"],
    "updates": [f"{name}_{kind}" for name in TABLES for kind in ("updates", "hot_updates")],
}


def plot(samples: list[dict], out: Path, kinds: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = samples[0]["t"]
    minutes = [(row["t"] - start) / 60 for row in samples]
    for name, keys in {**PLOTS, "rss_mib": [f"rss_{kind}_mib" for kind in kinds]}.items():
        figure, axes = plt.subplots(figsize=(7, 4))
        for key in keys:
            axes.plot(minutes, [row.get(key) for row in samples], label=key)
        axes.set_xlabel("minutes")
        axes.set_ylabel(name)
        axes.set_ylim(bottom=0)
        axes.legend(fontsize="x-small")
        figure.tight_layout()
        figure.savefig(out / f"{name}.png")
        plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=120.0, help="how long the load runs (default 120)")
    parser.add_argument("--rate", type=float, default=40.0, help="jobs enqueued per second (default 40)")
    parser.add_argument(
        "--retention-minutes",
        type=float,
        help="finished jobs pruned past this age (default: a fifth of the run, at most 5)",
    )
    parser.add_argument("--out", default=str(ROOT / "artifacts" / "soak"), help="report folder")
    parser.add_argument(
        "--redis-db", type=int, default=13, help="Redis database it empties and uses (default 13)"
    )
    parser.add_argument(
        "--judge", type=Path, help="judge and plot the samples.json of an earlier run instead of running"
    )
    args = parser.parse_args()
    if args.judge:
        return judge(args.judge)
    if args.minutes < 2:
        parser.error("--minutes: at least 2 (a warm-up and two windows of 30 s samples)")
    if args.retention_minutes is None:
        # Short of the run, so the tables reach the size the retention holds them at.
        args.retention_minutes = min(5.0, args.minutes / 5)

    sys.path[:0] = [str(BENCH_DIR), str(ROOT)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BENCH_LOG_DIR", str(out))
    os.environ.setdefault("BENCH_JOURNAL", str(out / "journal"))
    env = environment(args.retention_minutes, args.redis_db)
    from ours import setup_django

    setup_django({**env, "LOG_LEVEL": "WARNING"})  # this process's lines: the samples only
    # A stop (Ctrl-C or SIGTERM) still stops the processes and puts autovacuum back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with autovacuum_on() as autovacuum:
        print(f"soak: autovacuum {autovacuum}", flush=True)
        return soak(args, out, env)


def soak(args: argparse.Namespace, out: Path, env: dict[str, str]) -> int:
    """The run itself: processes up, the load on, a sample every 30 s, then the Goals."""
    from django.db import connection
    from ours import reset_stores

    from queue_app import broker

    reset_stores()
    manage = [python(), str(ROOT / "manage.py")]
    processes = {
        "relay": spawn([*manage, "runrelay"], env, "soak-relay"),
        "worker": spawn([*manage, "runworker", "--queues=default", "--concurrency=2"], env, "soak-worker"),
        # 2 slow jobs a second of 0.6 s each on average: 3 processes keep it under half busy.
        "slow_worker": spawn(
            [*manage, "runworker", "--queues=slow", "--concurrency=3"], env, "soak-slow-worker"
        ),
        "reconciler": spawn([*manage, "reconcile_queue", "--loop"], env, "soak-reconciler"),
    }
    load = Load(args.rate)
    samples: list[dict] = []
    duration = args.minutes * 60
    print(f"soak: {args.rate:g} jobs/s for {args.minutes:g} min; report in {out}", flush=True)
    try:
        load.start()
        started = last = time.time()
        last_prune, prune_seconds = time.monotonic(), None
        client = broker.get_client()
        with connection.cursor() as cursor:
            while time.time() - started < duration:
                time.sleep(max(0.0, last + SAMPLE_SECONDS - time.time()))
                if time.monotonic() - last_prune >= 60:
                    prune_seconds = prune(env, args.retention_minutes)
                    last_prune = time.monotonic()
                row = sample(cursor, client, processes, last)
                row["prune_seconds"], prune_seconds = prune_seconds, None
                last = row["t"]
                samples.append(row)
                # Written as it goes, so a run cut short still leaves its samples.
                (out / "samples.json").write_text(json.dumps({"args": vars(args), "samples": samples}))
                print(
                    f"  {(last - started) / 60:5.1f} min  {row['throughput']:6.1f} jobs/s"
                    f"  p99 {row['latency_p99_ms'] or 0:7.1f} ms  tables {row['tables_total_mib']:7.1f} MiB"
                    f"  worker {row['rss_worker_mib']:6.1f} MiB",
                    flush=True,
                )
                dead = [kind for kind, process in processes.items() if process.poll() is not None]
                if not load.is_alive():
                    dead.append("the load")
                if dead:
                    raise SystemExit(f"soak: {', '.join(dead)} exited early (see {out})")
    finally:
        load.stopping.set()
        stop_all(list(processes.values()))
    print(f"  jobs that finished before their cancel: {load.finished_before_cancel}", flush=True)
    return report({"args": vars(args), "samples": samples}, duration, out)


def report(run: dict, duration: float, out: Path) -> int:
    """Judge the samples, write them with their Goals and the plots; 0 when every goal is met."""
    samples = run["samples"]
    kinds = [key[len("rss_") : -len("_mib")] for key in samples[0] if key.startswith("rss_")]
    goals = soak_goals(samples, duration, kinds)
    (out / "samples.json").write_text(json.dumps({**run, "goals": goals}, indent=2))
    plot(samples, out, kinds)
    print("\nGoals")
    for goal in goals:
        print(f"  {'met' if goal['met'] else 'NOT MET':<8} {goal['goal']}: {goal['value']:.3f}")
    print(f"\nSamples, plots: {out}")
    return 0 if all(goal["met"] for goal in goals) else 1


def judge(path: Path) -> int:
    """The Goals and plots of a run's samples.json again, over the time its samples span
    (a run cut short is judged on what it measured)."""
    run = json.loads(path.read_text())
    samples = run["samples"]
    duration = samples[-1]["t"] - samples[0]["t"] + SAMPLE_SECONDS
    print(f"soak: judging {len(samples)} samples over {duration / 60:.1f} min from {path}")
    return report(run, duration, path.parent)


if __name__ == "__main__":
    sys.exit(main())
