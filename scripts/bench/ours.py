"""This project under the common workload: services API in, runrelay + runworker out.

The project comes from ``OURS_TREE``: this checkout, or an earlier commit's (run.py
--baseline, which gives it databases of its own through BENCH_OURS_DATABASE).
"""

from __future__ import annotations

import os
import sys
import time

from common import (
    BENCH_DIR,
    OURS_TREE,
    REDIS_DB,
    Adapter,
    database_url,
    python,
    redis_url,
    spawn,
)

# The tables reset_stores empties, where they exist (an earlier commit may have fewer).
TABLES = (
    "jobs, job_logs, job_outbox, job_schedules, job_dependencies, job_waits,"
    " job_workflow_steps, job_workflows, job_batch_members, job_batches"
).split(", ")


def table(name: str) -> str:
    """A table's name in the tree measured: a --baseline from before the app's prefix has
    the bare names (its migrations made them)."""
    from django.db import connection

    prefixed = f"queue_app_{name}"
    return prefixed if prefixed in _existing(connection) else name


def _existing(connection) -> set[str]:
    global _TABLE_NAMES
    if _TABLE_NAMES is None:
        _TABLE_NAMES = set(connection.introspection.table_names())
    return _TABLE_NAMES


_TABLE_NAMES: set[str] | None = None


def environment() -> dict[str, str]:
    """A production-like configuration (DEBUG off) on the benchmark's own stores."""
    return {
        **os.environ,
        # Overridable, so a run of its own (history.py) never shares the stores of another.
        "DATABASE_URL": database_url(os.environ.get("BENCH_OURS_DATABASE", "bench_ours")),
        "REDIS_URL": redis_url(int(os.environ.get("BENCH_OURS_REDIS_DB", REDIS_DB["ours"]))),
        "DJANGO_SETTINGS_MODULE": "jobsite.settings",
        "JOBSITE_EXTRA_APPS": "benchapp",
        "DEBUG": "0",
        "SECRET_KEY": "benchmark-only-key-not-secret-0123456789abcdefghijklmnopqrstuvwxyz",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join([str(OURS_TREE), str(BENCH_DIR)]),
    }


def setup_django(env: dict[str, str] | None = None) -> None:
    os.environ.update(env or environment())
    sys.path[:0] = [str(OURS_TREE), str(BENCH_DIR)]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# Under ./dev bench --history (history.py), jobs older than a day are the history the
# figures are measured over: a reset deletes only the day's jobs, and only those count.
KEEP_HISTORY = os.environ.get("BENCH_KEEP_HISTORY") == "1"
TODAY = "created_at > now() - interval '1 day'"


def reset_stores() -> None:
    from django.db import connection

    from queue_app import broker

    existing = _existing(connection)
    with connection.cursor() as cursor:
        if KEEP_HISTORY:
            jobs = table("jobs")
            for name in ("job_logs", "job_outbox"):  # names from this fixed tuple only
                cursor.execute(
                    f"DELETE FROM {table(name)} WHERE job_id IN (SELECT id FROM {jobs} WHERE {TODAY})"
                )
            cursor.execute(f"DELETE FROM {jobs} WHERE {TODAY}")
        else:
            cursor.execute(f"TRUNCATE {', '.join(table(name) for name in TABLES if table(name) in existing)}")
    broker.get_client().flushdb()


class Ours(Adapter):
    name = "ours"

    def __init__(self) -> None:
        setup_django()
        from queue_app.services import JobRequest, enqueue_job, enqueue_jobs

        self._enqueue_job, self._enqueue_jobs, self._request = enqueue_job, enqueue_jobs, JobRequest
        try:
            from queue_app.services import chain, chord, enqueue_workflow
        except ImportError:  # a tree from before workflows
            return
        self._chain, self._chord, self._enqueue_workflow = chain, chord, enqueue_workflow
        self.workflows = True

    def reset(self) -> None:
        reset_stores()

    def enqueue(self, arg: int) -> None:
        self._enqueue_job("bench.noop", {"n": arg})

    def enqueue_bulk(self, args: list[int]) -> None:
        self._enqueue_jobs([self._request(type="bench.noop", payload={"n": arg}) for arg in args])

    def after_enqueue(self) -> dict[str, float]:
        from django.db import connection

        from queue_app.runtime.relay import Relay

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*), extract(epoch FROM max(dispatch_after) - now()) "
                f"FROM {table('job_outbox')} WHERE dispatched_at IS NULL"
            )
            pending, wait = cursor.fetchone()
        # Jobs pushed to Redis by their enqueuer (DISPATCH_ON_COMMIT) leave their rows to
        # the relay's check only after RELAY_GRACE_SECONDS: what it measures is that check.
        time.sleep(max(0.0, float(wait or 0)))
        started = time.perf_counter()
        Relay(batch_size=1000).drain()
        seconds = time.perf_counter() - started
        return {"relay": pending / seconds} if pending else {}

    def start_workers(self, processes: int):
        env = environment()
        manage = str(OURS_TREE / "manage.py")
        return [
            spawn([python(), manage, "runrelay"], env, "ours-relay", cwd=OURS_TREE),
            spawn(
                [python(), manage, "runworker", f"--concurrency={processes}"],
                env,
                "ours-worker",
                cwd=OURS_TREE,
            ),
        ]

    def enqueue_chord(self, args: list[int], callback_arg: int):
        header = [self._request(type="bench.noop", payload={"n": arg}) for arg in args]
        callback = self._request(type="bench.collect", payload={"n": callback_arg})
        return self._last_job(self._enqueue_workflow(self._chord(header, callback)))

    def enqueue_chain(self, args: list[int]):
        steps = [self._request(type="bench.noop", payload={"n": arg}) for arg in args]
        return self._last_job(self._enqueue_workflow(self._chain(*steps)))

    @staticmethod
    def _last_job(workflow) -> str:
        return str(list(workflow.jobs.values())[-1].id)

    def finished_at(self, handle) -> float | None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT status, extract(epoch FROM completed_at) FROM {table('jobs')} WHERE id = %s",
                [handle],
            )
            status, completed = cursor.fetchone()
        if status in ("failed", "cancelled", "expired"):
            raise RuntimeError(f"workflow job {handle} ended {status}")
        return float(completed) if status == "completed" else None

    def done(self) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM {table('jobs')} WHERE status = 'completed'"
                + (f" AND {TODAY}" if KEEP_HISTORY else "")
            )
            return cursor.fetchone()[0]


ADAPTER = Ours
