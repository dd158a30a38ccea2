"""How this project's cost grows with its history: the standard figures and the read
pages, measured again over N finished jobs.

    ./dev bench --history 1000000,5000000 [--rounds 3] [--repeat 20]

For each N, the benchmark database ``bench_history`` is filled anew with N finished jobs
with their log trails, generated inside PostgreSQL (statuses as a healthy system
leaves them, spread over the 90 days before yesterday, ids made as the queue makes
them), then vacuumed and analysed as autovacuum would, and checkpointed. The standard
workload (scripts/bench/common.py: enqueue, drain with 1 and 2 processes,
enqueue-to-start) runs ``--rounds`` times over that history, in fresh processes as
``./dev bench`` runs it, each round beside one on an empty history
(``bench_history_empty``): the figures at N are ratios to those empty rounds, so the
machine's drift over a long run falls on both. The rounds' jobs are the day's: they
are deleted between rounds and the history stays. Then each read page is requested
``--repeat`` times (admin job list filters, an id-fragment search, a job page, the
API's first and a deep page, stats, the dashboard, /metrics) and its p95 reported, and
what one job's enqueue and drain cost PostgreSQL (WAL bytes, pages read, CPU) is counted as costs.py
counts it, over N and over the empty history one after the other. A Goals block judges
the ratios and pages, and one PNG per figure plots it against N (artifacts/bench/history/).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

from common import BENCH_DIR, ROOT, Workload, uuid7_sql

# Statuses of finished jobs, cumulative shares: most succeed, some fail or are cancelled. The
# rows of a fill are in time order across its batches, with ids made as the queue makes them.
FILL_SQL = f"""
WITH numbered AS (
    SELECT g, random() AS r,
           now() - interval '91 days' + (g::float8 / %(target)s) * interval '90 days' AS created
      FROM generate_series(%(start)s + 1, %(start)s + %(batch)s) AS g
), seeded AS (
    SELECT g, created,
           CASE WHEN r < 0.90 THEN 'completed' WHEN r < 0.96 THEN 'failed'
                WHEN r < 0.99 THEN 'cancelled' ELSE 'expired' END AS status
      FROM numbered
), inserted AS (
    INSERT INTO queue_app_jobs (id, type, queue, payload, priority, priority_value, status, attempts,
                      max_attempts, enqueued_at, created_at, started_at, completed_at, last_error,
                      last_error_class, last_error_traceback, result, idempotency_key,
                      idempotency_fingerprint, worker_id, backend)
    SELECT {uuid7_sql("created")}, (%(types)s::text[])[1 + g %% cardinality(%(types)s::text[])],
           (%(queues)s::text[])[1 + (g / 7) %% cardinality(%(queues)s::text[])],
           jsonb_build_object('n', g), 'medium', 0, status,
           CASE status WHEN 'failed' THEN 3 WHEN 'completed' THEN 1 ELSE 0 END, 3,
           created, created,
           CASE WHEN status IN ('completed', 'failed') THEN created + interval '40 ms' END,
           created + interval '1 second',
           CASE WHEN status = 'failed' THEN 'RuntimeError: upstream timed out (request ' || g || ')'
                ELSE '' END,
           CASE WHEN status = 'failed' THEN 'builtins.RuntimeError' ELSE '' END,
           CASE WHEN status = 'failed' THEN 'Traceback (most recent call last):' || chr(10)
                                            || 'RuntimeError: upstream timed out' ELSE '' END,
           CASE WHEN status = 'completed' THEN jsonb_build_object('ok', true) END,
           CASE WHEN g %% 10 = 0 THEN 'history-' || g END, '', '', ''
      FROM seeded
    RETURNING id, status, attempts, created_at, completed_at
)
INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
SELECT id, created_at, 'info', 'enqueued', '', '{{}}'::jsonb FROM inserted
UNION ALL
SELECT id, created_at + interval '40 ms', 'info', 'claimed', '', jsonb_build_object('attempt', 1)
  FROM inserted WHERE attempts > 0
UNION ALL
SELECT id, completed_at, CASE WHEN status = 'failed' THEN 'error' ELSE 'info' END, status, '',
       jsonb_build_object('attempt', attempts)
  FROM inserted
"""

FILL_BATCH = 500_000
# The figures of the standard workload, and which way is better (1: higher).
FIGURES = {
    "enqueue": 1,
    "bulk_enqueue": 1,
    "drain_1": 1,
    "drain_2": 1,
    "latency_p50_ms": -1,
    "latency_p99_ms": -1,
}
FIGURE_GOAL = 0.85
PAGE_GOAL_MS = 200.0
# At the largest size the oldest days of the history are pruned, as the retention would: jobs
# deleted per second, beside the same size's enqueue rate. Pruning slower than one enqueuer
# adds jobs would fall behind, and then job_logs would want partitioning by time.
PRUNE_DAYS = 6
# The empty history the rounds at each size alternate with: a database of its own.
EMPTY_DATABASE = "bench_history_empty"
HISTORY_DATABASE = "bench_history"
# What one job costs PostgreSQL at each size, measured as costs.py does (counters, not
# rates): the figures the machine's noise moves least. (phase, counter, label)
COST_JOBS = 5000
COSTS = [
    ("enqueue", "wal_bytes", "enqueue WAL bytes/job"),
    ("enqueue", "pg_pages", "enqueue PostgreSQL pages read/job"),
    ("enqueue", "postgres_cpu_ms", "enqueue PostgreSQL CPU ms/job"),
    ("drain", "wal_bytes", "drain WAL bytes/job"),
    ("drain", "pg_pages", "drain PostgreSQL pages read/job"),
    ("drain", "postgres_cpu_ms", "drain PostgreSQL CPU ms/job"),
    ("drain", "process_cpu_ms", "drain worker CPU ms/job"),
]


def history_count() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM queue_app_jobs WHERE created_at < now() - interval '1 day'")
        return cursor.fetchone()[0]


def fill(target: int) -> None:
    """Make the history hold ``target`` jobs, kept when it already does. A history of another
    size is generated anew: grown by the difference, the new rows would start where the old
    ones' 90 days end in time order, or crowd into the recent days, not spread as N jobs are."""
    from django.db import connection

    from queue_app.conf import queue_settings
    from queue_app.handlers import registered_types

    have = history_count()
    if have != target:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE queue_app_jobs CASCADE")  # and every table that refers to it
        have = 0
    started = time.perf_counter()
    types, queues = registered_types(), list(queue_settings().QUEUES)
    with connection.cursor() as cursor:
        while have < target:
            batch = min(FILL_BATCH, target - have)
            cursor.execute(
                FILL_SQL,
                {"start": have, "batch": batch, "target": target, "types": types, "queues": queues},
            )
            have += batch
            print(f"    history {have:,} / {target:,}", file=sys.stderr, flush=True)
        for table in ("queue_app_jobs", "queue_app_job_logs", "queue_app_job_outbox"):
            cursor.execute(f"VACUUM ANALYZE {table}")  # names from this fixed tuple only
        # The fill's pages reach the disk now, not through the checkpoints of the rounds.
        cursor.execute("CHECKPOINT")
    print(f"    filled in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def pages() -> list[tuple[str, str]]:
    """(label, URL) of every read page timed, with ids taken from the history."""
    from django.urls import reverse

    from queue_app.models import Job

    changelist = reverse("admin:queue_app_job_changelist")
    sample = Job.objects.filter(status="failed").order_by().values_list("id", "type", "queue").first()
    if sample is None:  # an empty history: a job of the day's rounds
        sample = Job.objects.order_by().values_list("id", "type", "queue").first()
    job_id, job_type, queue = sample
    return [
        ("admin job list", changelist),
        ("admin job list, status=failed", f"{changelist}?status__exact=failed"),
        ("admin job list, queue", f"{changelist}?queue={queue}"),
        ("admin job list, type", f"{changelist}?type={job_type}"),
        ("admin job list, search id fragment", f"{changelist}?q={str(job_id)[-12:]}"),
        ("admin job page", reverse("admin:queue_app_job_change", args=[job_id])),
        ("admin dashboard", reverse("admin:queue_app_job_dashboard")),
        ("api jobs, first page", "/api/jobs/"),
        ("api jobs, deep page", "/api/jobs/?page=200"),
        ("api stats", reverse("stats")),
        ("metrics", "/metrics"),
    ]


def page_p95s(repeat: int) -> dict[str, float]:
    """p95 in ms of each page, requested by a logged-in superuser through Django's client."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    p95s = {}
    for label, url in pages():
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            response = client.get(url)
            timings.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"{label}: HTTP {response.status_code} for {url}")
        p95s[label] = statistics.quantiles(timings, n=20, method="inclusive")[18]
    return p95s


def prune_rate(days: int) -> dict[str, float]:
    """Prune the ``days`` oldest days of the history with the retention's own code; its rate."""
    from datetime import timedelta

    from django.utils import timezone

    from queue_app.engine.retention import prune_finished_jobs
    from queue_app.states import TERMINAL

    cutoff = timezone.now() - timedelta(days=91 - days)
    started = time.perf_counter()
    counts = prune_finished_jobs(finished_before=dict.fromkeys(TERMINAL, cutoff))
    seconds = time.perf_counter() - started
    deleted = sum(counts.values())
    return {"prune_jobs": deleted, "prune_seconds": seconds, "prune_jobs_per_s": deleted / seconds}


def child(step: str, argument: int) -> None:
    """In a process of its own (Django set up on the benchmark database): ``fill`` N, time
    the ``pages`` (after the rounds, so an empty history still has the day's jobs), or
    ``prune`` the oldest days."""
    from ours import setup_django

    setup_django({**_environment(), "DEBUG": "1"})  # DEBUG: the admin's static files unbuilt
    if step == "fill":
        fill(argument)
        print(json.dumps({"history": history_count()}))
    elif step == "prune":
        print(json.dumps({"prune": prune_rate(argument)}))
    else:
        print(json.dumps({"pages": page_p95s(argument)}))


def _environment() -> dict[str, str]:
    from ours import environment

    own = {"BENCH_KEEP_HISTORY": "1", "BENCH_OURS_DATABASE": HISTORY_DATABASE, "BENCH_OURS_REDIS_DB": "11"}
    os.environ.update(own)
    return {**environment(), **own}


def run(
    sizes: list[int], rounds: int, repeat: int, workload: Workload, run_child, out: Path, env: dict
) -> int:
    """Measure every size, its rounds alternating with rounds on an empty history; print the
    table and the Goals; write JSON and the plots."""
    env = {**env, **_environment()}
    empty_env = {**env, "BENCH_OURS_DATABASE": EMPTY_DATABASE}
    results: dict = {"sizes": {}, "workload": asdict(workload), "rounds": rounds}
    empty_runs: list[dict] = []
    emptied = run_child("history.py", "fill", "0", env=empty_env)
    largest = max(sizes, default=0)
    for size in sorted(set(sizes) - {0}):
        print(f"  history {size:,}: fill ...", file=sys.stderr, flush=True)
        filled = run_child("history.py", "fill", str(size), env=env)
        paired, runs = [], []
        for index in range(rounds):
            # Each round at N beside one on the empty history: the machine's drift over the
            # run falls on both, not on the larger sizes measured later.
            for label, target, kept in (("empty", empty_env, paired), (f"{size:,}", env, runs)):
                print(f"  history {label}: round {index + 1}/{rounds} ...", file=sys.stderr, flush=True)
                kept.append(run_child("runner.py", "ours", json.dumps(asdict(workload)), env=target))
        empty_runs += paired
        print(f"  history {size:,}: pages ...", file=sys.stderr, flush=True)
        timed = run_child("history.py", "pages", str(repeat), env=env)
        print(
            f"  history {size:,}: cost per job, beside the empty history's ...", file=sys.stderr, flush=True
        )
        empty_costs = run_child("costs.py", str(COST_JOBS), EMPTY_DATABASE, env=empty_env)
        costs = run_child("costs.py", str(COST_JOBS), HISTORY_DATABASE, env=env)
        pruned = {}
        if size == largest:
            print(f"  history {size:,}: prune the oldest {PRUNE_DAYS} days ...", file=sys.stderr, flush=True)
            pruned = run_child("history.py", "prune", str(PRUNE_DAYS), env=env)
        results["sizes"][size] = {
            "pages": timed.get("pages", {}),
            "figures": _medians(runs),
            "empty_figures": _medians(paired),
            # Each round's figures, in the order run: how far one round moves from the next.
            "rounds": [run.get("figures", {}) for run in runs],
            "empty_rounds": [run.get("figures", {}) for run in paired],
            "costs": costs.get("costs", {}),
            "empty_costs": empty_costs.get("costs", {}),
            "prune": pruned.get("prune", {}),
            "errors": [
                run["error"]
                for run in [filled, *paired, *runs, timed, empty_costs, costs, pruned]
                if "error" in run
            ],
        }
    print("  history empty: pages ...", file=sys.stderr, flush=True)
    timed = run_child("history.py", "pages", str(repeat), env=empty_env)
    results["sizes"][0] = {
        "pages": timed.get("pages", {}),
        "figures": _medians(empty_runs),
        "costs": _median_costs([entry["empty_costs"] for entry in results["sizes"].values()]),
        "prune": {},
        "errors": [run["error"] for run in [emptied, timed] if "error" in run],
    }
    results["sizes"] = dict(sorted(results["sizes"].items()))
    results["goals"] = history_goals(results["sizes"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(render(results))
    plot(results["sizes"], out)
    print(f"\nJSON and plots: {out}")
    failed = any(entry["errors"] for entry in results["sizes"].values())
    return 1 if failed else 0


def _medians(runs: list[dict]) -> dict[str, float]:
    figures = [run["figures"] for run in runs if "figures" in run]
    return {key: statistics.median(f[key] for f in figures) for key in FIGURES} if figures else {}


def _median_costs(measured: list[dict]) -> dict[str, dict[str, float]]:
    """Each phase's counters, the median over the empty history's measurements."""
    measured = [costs for costs in measured if costs]
    if not measured:
        return {}
    return {
        phase: {key: statistics.median(costs[phase][key] for costs in measured) for key in counters}
        for phase, counters in measured[0].items()
    }


def ratio(key: str, figure: float, empty: float) -> float:
    """Figure at N relative to the empty table's; above 1 is better either way."""
    return figure / empty if FIGURES[key] > 0 else empty / figure


def history_goals(sizes: dict[int, dict]) -> list[dict]:
    goals = []
    for size, entry in sizes.items():
        if size == 0:
            continue
        # Against the empty-history rounds run beside this size's (all of them when absent).
        empty = entry.get("empty_figures") or sizes[0]["figures"]
        for key, figure in entry["figures"].items():
            if key in empty and figure and empty[key]:
                value = ratio(key, figure, empty[key])
                goals.append(
                    {
                        "goal": f"{key} at {size:,} vs empty >= {FIGURE_GOAL}x",
                        "value": value,
                        "met": value >= FIGURE_GOAL,
                    }
                )
    largest = max(sizes)
    prune, enqueue = sizes[largest].get("prune"), sizes[largest]["figures"].get("enqueue")
    if prune and enqueue:
        value = prune["prune_jobs_per_s"] / enqueue
        goals.append(
            {
                "goal": f"prune rate at {largest:,} vs one enqueuer's rate >= 1x",
                "value": value,
                "met": value >= 1.0,
            }
        )
    for label, p95 in sizes[largest]["pages"].items():
        goals.append(
            {
                "goal": f"{label} p95 at {largest:,} < {PAGE_GOAL_MS:.0f} ms",
                "value": p95,
                "met": p95 < PAGE_GOAL_MS,
            }
        )
    return goals


def render(results: dict) -> str:
    sizes = results["sizes"]
    columns = sorted(sizes)
    header = f"{'figure':<42}" + "".join(f"{size:>14,}" for size in columns)
    lines = [
        f"history (finished jobs) -> figures, medians of {results['rounds']} round(s)",
        header,
        "-" * len(header),
    ]
    for key in FIGURES:
        lines.append(
            f"{key:<42}" + "".join(f"{sizes[s]['figures'].get(key, float('nan')):>14,.1f}" for s in columns)
        )
    labels = list(sizes[columns[-1]]["pages"])
    for label in labels:
        lines.append(
            f"{label + ' p95 ms':<42}"
            + "".join(f"{sizes[s]['pages'].get(label, float('nan')):>14,.1f}" for s in columns)
        )
    for phase, counter, label in COSTS:
        lines.append(
            f"{label:<42}"
            + "".join(
                f"{sizes[s].get('costs', {}).get(phase, {}).get(counter, float('nan')):>14,.3f}"
                for s in columns
            )
        )
    for size in columns:
        prune = sizes[size].get("prune")
        if prune:
            lines.append(
                f"prune at {size:,}: {prune['prune_jobs']:,} jobs with their trails in"
                f" {prune['prune_seconds']:.1f} s ({prune['prune_jobs_per_s']:,.0f} jobs/s)"
            )
    lines.append("\nGoals")
    for goal in results["goals"]:
        mark = "met" if goal["met"] else "NOT MET"
        lines.append(f"  {mark:<8} {goal['goal']}: {goal['value']:.2f}")
    for size in columns:
        for error in sizes[size]["errors"]:
            lines.append(f"FAILED at {size:,}: {error}")
    return "\n".join(lines)


def plot(sizes: dict[int, dict], out: Path) -> None:
    """One PNG per figure and one for the pages, each against the history size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = sorted(sizes)
    for key in FIGURES:
        values = [sizes[s]["figures"].get(key) for s in columns]
        if None in values:
            continue
        figure, axes = plt.subplots(figsize=(6, 4))
        axes.plot(columns, values, marker="o")
        axes.set_xlabel("finished jobs in history")
        axes.set_ylabel(key)
        axes.set_ylim(bottom=0)
        axes.set_title(f"{key} against history size")
        figure.tight_layout()
        figure.savefig(out / f"{key}.png")
        plt.close(figure)
    figure, axes = plt.subplots(figsize=(7, 5))
    for label in sizes[columns[-1]]["pages"]:
        axes.plot(
            columns, [sizes[s]["pages"].get(label, float("nan")) for s in columns], marker="o", label=label
        )
    axes.axhline(PAGE_GOAL_MS, linestyle="--", color="grey")
    axes.set_xlabel("finished jobs in history")
    axes.set_ylabel("p95 ms")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="x-small")
    axes.set_title("read pages against history size")
    figure.tight_layout()
    figure.savefig(out / "pages_p95_ms.png")
    plt.close(figure)


if __name__ == "__main__":
    sys.path[:0] = [str(BENCH_DIR), str(ROOT)]
    child(sys.argv[1], int(sys.argv[2]))
