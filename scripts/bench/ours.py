"""This project under the common workload: services API in, runrelay + runworker out."""

from __future__ import annotations

import os
import sys
import time

from common import BENCH_DIR, REDIS_DB, ROOT, Adapter, database_url, python, redis_url, spawn


def environment() -> dict[str, str]:
    """A production-like configuration (DEBUG off) on the benchmark's own stores."""
    return {
        **os.environ,
        "DATABASE_URL": database_url("bench_ours"),
        "REDIS_URL": redis_url(REDIS_DB["ours"]),
        "DJANGO_SETTINGS_MODULE": "jobsite.settings",
        "JOBSITE_EXTRA_APPS": "benchapp",
        "DEBUG": "0",
        "SECRET_KEY": "benchmark-only-key-not-secret-0123456789abcdefghijklmnopqrstuvwxyz",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCH_DIR)]),
    }


def setup_django(env: dict[str, str] | None = None) -> None:
    os.environ.update(env or environment())
    sys.path[:0] = [str(ROOT), str(BENCH_DIR)]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def reset_stores() -> None:
    from django.db import connection

    from queue_app import broker

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE queue_app_jobs, queue_app_job_logs, queue_app_job_outbox, queue_app_job_schedules,"
            " queue_app_job_dependencies, queue_app_job_waits, queue_app_job_workflow_steps,"
            " queue_app_job_workflows, queue_app_job_batch_members, queue_app_job_batches"
        )
    broker.get_client().flushdb()


class Ours(Adapter):
    name = "ours"

    def __init__(self) -> None:
        setup_django()
        from queue_app.services import JobRequest, enqueue_job, enqueue_jobs

        self._enqueue_job, self._enqueue_jobs, self._request = enqueue_job, enqueue_jobs, JobRequest

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
                "FROM queue_app_job_outbox WHERE dispatched_at IS NULL"
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
        manage = str(ROOT / "manage.py")
        return [
            spawn([python(), manage, "runrelay"], env, "ours-relay"),
            spawn([python(), manage, "runworker", f"--concurrency={processes}"], env, "ours-worker"),
        ]

    def done(self) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM queue_app_jobs WHERE status = 'completed'")
            return cursor.fetchone()[0]


ADAPTER = Ours
