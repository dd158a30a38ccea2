"""Benchmark this project beside pgqueuer, procrastinate, Celery and django-tasks-db.

    ./dev bench [--quick] [--baseline REF] [options]   (sets up .venv-bench, then runs this)

Every system runs the same no-op workload on the same PostgreSQL and Redis
(BENCH_DATABASE_URL, BENCH_REDIS_URL; default the local servers) in
databases of its own (bench_*) and Redis databases 8-10, which it EMPTIES.
This project runs first (``--rounds`` - 1 repetitions) and last (one), to show the
machine's drift; each system's figures are medians of ``--rounds`` repetitions,
each repetition in a fresh process. Prints a table
with the ratios ours / peer and writes everything as JSON.

--baseline REF also runs this project as of git ref REF (a commit before a change),
checked out into a temporary git worktree (removed afterwards) with databases of its
own (bench_ours_baseline, bench_reconcile_baseline, dropped first): each round of this
tree is paired with one of the baseline's, in alternating order, and the table adds
the baseline's figures with the ratio current / baseline beside the peers'.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

import backlog
import costs
import history
from autovacuum import autovacuum_on
from common import BENCH_DIR, ROOT, Workload, python, redis_url
from report import WORKFLOW_FIGURES, goals, render

PEERS = {
    "pgqueuer": "peer_pgqueuer",
    "procrastinate": "peer_procrastinate",
    "celery": "peer_celery",
    "django-tasks-db": "peer_djtasks",
}
QUICK = Workload(jobs=300, latency_seconds=1, saturation_jobs=200, timeout=120, workflow_repeats=1)
# The baseline's databases (its migrations may differ from this tree's), by variable.
BASELINE_DATABASES = {
    "BENCH_OURS_DATABASE": "bench_ours_baseline",
    "BENCH_RECONCILE_DATABASE": "bench_reconcile_baseline",
}


def last_json_line(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def run_child(script: str, *args: str, env: dict[str, str]) -> dict:
    """Run one measuring process; its figures, or the error it ended with."""
    completed = subprocess.run(
        [python(), str(BENCH_DIR / script), *args], env=env, cwd=BENCH_DIR, capture_output=True, text=True
    )
    log = Path(env["BENCH_LOG_DIR"]) / "children.log"
    with log.open("a") as handle:
        handle.write(f"$ {script} {' '.join(args)}\n{completed.stderr}\n")
    if completed.returncode != 0:
        lines = (completed.stderr or completed.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {completed.returncode}"}
    return last_json_line(completed.stdout)


def server_facts(env: dict[str, str]) -> dict:
    import psycopg
    import redis

    base = env.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    with psycopg.connect(base, autocommit=True) as conn:
        facts = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # names from this fixed tuple only
            for name in ("server_version", "fsync", "synchronous_commit")
        }
    client = redis.Redis.from_url(redis_url(8))
    facts["redis_version"] = client.info("server")["redis_version"]
    facts["redis_appendonly"] = client.config_get("appendonly").get("appendonly")
    facts["redis_save"] = client.config_get("save").get("save")
    facts.update(cores=os.cpu_count(), platform=platform.platform(), python=platform.python_version())
    return facts


@contextmanager
def baseline_tree(ref: str):
    """A temporary git worktree of ``ref`` (detached), and its commit; removed on the way out."""
    git = ["git", "-C", str(ROOT)]
    resolved = subprocess.run(
        [*git, "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True, text=True
    )
    if resolved.returncode != 0:
        raise SystemExit(f"--baseline: {ref!r} is not a commit of this repository")
    commit = resolved.stdout.strip()
    parent = Path(tempfile.mkdtemp(prefix="bench-baseline-"))
    tree = parent / "tree"
    try:
        subprocess.run([*git, "worktree", "add", "--quiet", "--detach", str(tree), commit], check=True)
        yield tree, commit
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


def drop_databases(env: dict[str, str], names: tuple[str, ...]) -> None:
    """A baseline starts from empty databases: another commit's migrations may have run there."""
    import psycopg
    from psycopg import sql

    base = env.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    with psycopg.connect(base, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def medians(runs: list[dict]) -> dict[str, float]:
    figures = [run["figures"] for run in runs if "figures" in run]
    keys = sorted({key for figure in figures for key in figure})
    return {key: statistics.median(f[key] for f in figures if key in f) for key in keys}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke check: 300 jobs, 1 round, 10,000 to reconcile"
    )
    parser.add_argument("--rounds", type=int, help="repetitions per system (default 3; 1 with --quick)")
    parser.add_argument("--jobs", type=int, help="jobs per enqueue and drain (default 5,000)")
    parser.add_argument("--systems", default="ours," + ",".join(PEERS), help="comma-separated; default all")
    parser.add_argument("--reconcile-jobs", type=int, help="queued jobs to reconcile (default 1,000,000)")
    parser.add_argument("--http-requests", type=int, help="POST /api/jobs/ requests (default 3,000)")
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also run this project as of git ref REF (from a temporary worktree), rounds alternated"
        " with this tree's; prints current / baseline for each of its figures",
    )
    parser.add_argument(
        "--json", default=str(ROOT / "artifacts" / "bench" / "results.json"), help="output file"
    )
    parser.add_argument(
        "--history",
        help="comma-separated history sizes (finished jobs), e.g. 1000000,5000000: this project's figures "
        "and read pages measured over each, against an empty table (history.py)",
    )
    parser.add_argument(
        "--repeat", type=int, default=20, help="with --history: requests per page (p95 reported)"
    )
    parser.add_argument(
        "--costs", type=int, help="this project only: what one job costs PostgreSQL, Redis and each process"
    )
    parser.add_argument(
        "--backlog", type=int, help="this project only: drain a backlog of this many jobs after a Redis loss"
    )
    args = parser.parse_args()

    workload = QUICK if args.quick else Workload()
    if args.jobs:
        workload = replace(workload, jobs=args.jobs)
    rounds = args.rounds or (1 if args.quick else 3)
    reconcile_jobs = (
        args.reconcile_jobs if args.reconcile_jobs is not None else (10_000 if args.quick else 1_000_000)
    )
    http_requests = args.http_requests if args.http_requests is not None else (500 if args.quick else 3_000)
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = [name for name in systems if name != "ours" and name not in PEERS]
    if unknown:
        parser.error(f"--systems: unknown {', '.join(unknown)}; known: ours, {', '.join(PEERS)}")
    if args.baseline and "ours" not in systems:
        parser.error("--baseline compares this project with itself: --systems must include ours")
    if args.baseline and (args.history or args.backlog):
        parser.error("--baseline runs the standard workload: not with --history or --backlog")
    if args.baseline:
        with baseline_tree(args.baseline) as (tree, commit):
            return run(args, workload, rounds, reconcile_jobs, http_requests, systems, (tree, commit))
    return run(args, workload, rounds, reconcile_jobs, http_requests, systems, None)


def run(args, workload, rounds, reconcile_jobs, http_requests, systems, baseline) -> int:
    """The whole run; ``baseline`` is (worktree, commit) with --baseline, else None."""
    out = Path(args.json)
    log_dir = out.parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "BENCH_JOURNAL": str(out.parent / "journal"),
        "BENCH_LOG_DIR": str(log_dir),
        "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(ROOT)]),
    }
    if args.costs:
        return costs.run(args.costs, run_child, out.parent, env)
    if args.backlog:
        # Long runs whose tables churn: measured as a production server runs, autovacuum on.
        with autovacuum_on() as autovacuum:
            print(f"autovacuum {autovacuum}", file=sys.stderr, flush=True)
            return backlog.run(args.backlog, run_child, out.parent, env)
    if args.history:
        sizes = [int(size.replace("_", "")) for size in args.history.split(",") if size.strip()]
        # Its figures leave workflows out; its resets delete jobs by SQL, which a workflow's rows refer to.
        workload = replace(workload, workflow_repeats=0)
        with autovacuum_on() as autovacuum:
            print(f"autovacuum {autovacuum}", file=sys.stderr, flush=True)
            return history.run(sizes, rounds, args.repeat, workload, run_child, out.parent / "history", env)
    results: dict = {"machine": server_facts(env), "workload": asdict(workload), "rounds": rounds, "runs": []}
    started = time.monotonic()
    spec = json.dumps(asdict(workload))
    # "ours" runs as this tree and, with --baseline, as the baseline's (first on the path).
    variants = {"ours": env}
    if baseline:
        tree, commit = baseline
        named = "" if commit.startswith(args.baseline) else f"{args.baseline} = "
        git_log = ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", commit]
        subject = named + subprocess.run(git_log, capture_output=True, text=True).stdout.strip()
        results["baseline"] = {"ref": args.baseline, "commit": commit, "subject": subject}
        drop_databases(env, tuple(BASELINE_DATABASES.values()))
        variants["baseline"] = {
            **env,
            **BASELINE_DATABASES,
            "BENCH_OURS_TREE": str(tree),
            "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(tree)]),
        }
    pairs = 0

    def ours_order() -> list[str]:
        """This tree and the baseline, in alternating order from one pair to the next."""
        nonlocal pairs
        order = list(variants) if pairs % 2 == 0 else list(reversed(variants))
        pairs += 1
        return order

    phase_seconds: dict[str, float] = {}

    def measure(system: str, position: str, repetitions: int) -> None:
        module = "ours" if system == "ours" else PEERS[system]
        phase_started = time.monotonic()
        for index in range(repetitions):
            for variant in ours_order() if system == "ours" else [system]:
                print(
                    f"  {variant} ({position}) round {index + 1}/{repetitions} ...",
                    file=sys.stderr,
                    flush=True,
                )
                run = run_child("runner.py", module, spec, env=variants.get(variant, env))
                run["system"] = variant
                run["position"] = position
                results["runs"].append(run)
                if "error" in run:
                    print(f"    {variant} failed: {run['error']}", file=sys.stderr)
        phase_seconds[f"{system} ({position})"] = time.monotonic() - phase_started

    peers = [name for name in systems if name != "ours"]
    if "ours" in systems:
        measure("ours", "first", max(1, rounds - 1))
        if http_requests:
            print(f"  ours HTTP submit, {http_requests} requests ...", file=sys.stderr, flush=True)
            phase_started = time.monotonic()
            for _ in range(rounds):
                for variant in ours_order():
                    http = run_child("ours_http.py", str(http_requests), env=variants[variant])
                    results.setdefault("http", []).append({**http, "system": variant})
            phase_seconds["ours HTTP"] = time.monotonic() - phase_started
    for peer in peers:
        measure(peer, "middle", rounds)
    if "ours" in systems:
        measure("ours", "last", 1)
        if reconcile_jobs:
            print(f"  ours reconcile, {reconcile_jobs:,} queued jobs ...", file=sys.stderr, flush=True)
            phase_started = time.monotonic()
            for variant in ours_order():
                reconcile = run_child("reconcile.py", str(reconcile_jobs), env=variants[variant])
                results["reconcile" if variant == "ours" else f"reconcile_{variant}"] = reconcile
            phase_seconds["ours reconcile"] = time.monotonic() - phase_started

    by_system: dict[str, list[dict]] = {}
    for run in results["runs"]:
        key = f"ours ({run['position']})" if run["system"] == "ours" else run["system"]
        by_system.setdefault(key, []).append(run)
        if run["system"] == "ours":
            by_system.setdefault("ours", []).append(run)
    results["medians"] = {system: medians(runs) for system, runs in by_system.items()}
    for variant in variants:
        http = [run for run in results.get("http", []) if run["system"] == variant]
        rates = [run["http_submit"] for run in http if "http_submit" in run]
        if rates:
            results["medians"].setdefault(variant, {})["http_submit"] = statistics.median(rates)
        reconcile = results.get("reconcile" if variant == "ours" else f"reconcile_{variant}") or {}
        if reconcile.get("reconcile_s") is not None:
            for key in ("reconcile_s", "reconcile_rss_mib"):
                results["medians"].setdefault(variant, {})[key] = reconcile[key]
    # Systems without workflows (or a baseline from before them) show "n/a" for those figures.
    results["without_workflows"] = sorted(
        system
        for system, runs in by_system.items()
        if (measured := [run["figures"] for run in runs if "figures" in run])
        and all(WORKFLOW_FIGURES.isdisjoint(figures) for figures in measured)
    )
    if baseline:
        peers = [*peers, "baseline"]
    results["ratios"] = {
        peer: {
            key: results["medians"]["ours"][key] / value
            for key, value in results["medians"].get(peer, {}).items()
            if key in results["medians"].get("ours", {}) and value
        }
        for peer in peers
    }
    results["goals"] = goals(results)
    results["errors"] = [run for run in results["runs"] if "error" in run]
    results["seconds"] = time.monotonic() - started
    results["phase_seconds"] = phase_seconds
    out.write_text(json.dumps(results, indent=2))
    print(render(results, peers))
    phases = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phase_seconds.items())
    print(f"\nJSON: {out}   ({results['seconds'] / 60:.1f} min: {phases})")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
