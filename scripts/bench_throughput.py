#!/usr/bin/env python
"""Throughput benchmark: enqueue, relay and drain no-op jobs, with fsync on.

Creates (and empties) its own database ``<db>_throughput`` on the server of
DATABASE_URL and uses one Redis database (EMPTIED). Each round enqueues N
``demo.echo`` jobs in bulk, relays them, then times ``runworker --burst`` with
1 and with 2 worker processes draining them. Prints every round and the
medians. Every job still gets its row, its log trail and its outbox row.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/jobsite REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python scripts/bench_throughput.py --jobs 20000 --rounds 3 --redis-db 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from benchdb import ensure_database

ROOT = Path(__file__).resolve().parent.parent


def _database_urls(base_url: str) -> tuple[str, str]:
    parts = urlsplit(base_url)
    name = parts.path.lstrip("/") or "postgres"
    bench = f"{name}_throughput"
    return urlunsplit(parts._replace(path="/postgres")), urlunsplit(parts._replace(path=f"/{bench}"))


def _redis_url(base_url: str, db: int) -> str:
    parts = urlsplit(base_url)
    if parts.scheme == "unix":
        return urlunsplit(parts._replace(query=f"db={db}"))
    return urlunsplit(parts._replace(path=f"/{db}"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis-db", type=int, default=9)
    parser.add_argument("--batch-size", type=int, default=100, help="JOBQUEUE WORKER_BATCH_SIZE for the run")
    parser.add_argument("--concurrency", default="1,2", help="worker process counts to time")
    args = parser.parse_args()

    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        parser.error(
            "set DATABASE_URL and REDIS_URL (the benchmark creates its own database and empties a Redis db)"
        )
    admin_url, bench_url = _database_urls(os.environ["DATABASE_URL"])
    redis_url = _redis_url(os.environ["REDIS_URL"], args.redis_db)
    ensure_database(admin_url, urlsplit(bench_url).path.lstrip("/"))
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        fsync = conn.execute("SHOW fsync").fetchone()[0]
        synchronous_commit = conn.execute("SHOW synchronous_commit").fetchone()[0]

    env = {
        **os.environ,
        "DATABASE_URL": bench_url,
        "REDIS_URL": redis_url,
        "DEBUG": "1",
        "LOG_FORMAT": "json",
        "JOBQUEUE_WORKER_BATCH_SIZE": str(args.batch_size),
    }
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from queue_app import broker
    from queue_app.runtime.relay import Relay
    from queue_app.services import JobRequest, enqueue_jobs

    call_command("migrate", verbosity=0)
    counts = [int(c) for c in args.concurrency.split(",")]
    figures: dict[str, list[float]] = {"enqueue": [], "relay": []}
    for count in counts:
        figures[f"drain x{count}"] = []

    print(
        f"{args.jobs} no-op jobs per round, {args.rounds} rounds, fsync={fsync}, "
        f"synchronous_commit={synchronous_commit}, worker batch {args.batch_size}, {os.cpu_count()} cores"
    )
    for round_number in range(1, args.rounds + 1):
        for count in counts:
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE jobs, job_logs, job_outbox")
            broker.get_client().flushdb()
            started = time.perf_counter()
            for start in range(0, args.jobs, 1000):
                enqueue_jobs([JobRequest(type="demo.echo") for _ in range(min(1000, args.jobs - start))])
            enqueue_seconds = time.perf_counter() - started
            started = time.perf_counter()
            Relay(batch_size=1000).drain()
            relay_seconds = time.perf_counter() - started
            connection.close()
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, str(ROOT / "manage.py"), "runworker", "--burst", f"--concurrency={count}"],
                env=env,
                check=True,
                stderr=subprocess.DEVNULL,
            )
            drain_seconds = time.perf_counter() - started
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM jobs WHERE status = 'completed'")
                completed = cursor.fetchone()[0]
            if completed != args.jobs:
                print(f"only {completed} of {args.jobs} jobs completed", file=sys.stderr)
                return 1
            if count == counts[0]:
                figures["enqueue"].append(args.jobs / enqueue_seconds)
                figures["relay"].append(args.jobs / relay_seconds)
            figures[f"drain x{count}"].append(args.jobs / drain_seconds)
            rates = (args.jobs / enqueue_seconds, args.jobs / relay_seconds, args.jobs / drain_seconds)
            print(
                f"round {round_number}, {count} worker process(es): enqueue {rates[0]:,.0f}/s, "
                f"relay {rates[1]:,.0f}/s, drain {rates[2]:,.0f} jobs/s (process start-up included)"
            )
    print("\nmedians (jobs/s):")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"  {name:<10} {median:>8,.0f}   (min {min(values):,.0f}, max {max(values):,.0f})")
    if len(counts) > 1:
        base = statistics.median(figures[f"drain x{counts[0]}"])
        for count in counts[1:]:
            ratio = statistics.median(figures[f"drain x{count}"]) / base
            print(f"  drain x{count} / drain x{counts[0]} = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
