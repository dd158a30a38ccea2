"""run_jobs needs neither Redis nor a relay nor a worker process: with Redis unreachable and
every Redis connection attempt recorded, jobs of every outcome run, inside the test's
transaction and in transactional tests alike.

Celery's eager mode is the reference: a task called eagerly never reaches the broker.
"""

import contextlib
from unittest import mock

import pytest
from django.test import override_settings
from redis.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

import tests.testing.jobs  # noqa: F401 - registers the handlers these tests run
from queue_app.engine import sql
from queue_app.models import Job
from queue_app.services import enqueue_job
from queue_app.testing import RunSummary, run_jobs
from tests.probe import jobs as probe
from tests.probe.models import Effect

# A port nothing listens on.
CLOSED_REDIS_URL = "redis://127.0.0.1:1/0"


@contextlib.contextmanager
def redis_unreachable():
    """Point the process at a closed Redis port and record every connection any Redis
    client of this process attempts (a tripwire: the attempt still fails as it would)."""
    attempts: list[str] = []

    def tripwire(connection, *args, **kwargs):
        attempts.append(f"{connection.host}:{connection.port}")
        raise RedisConnectionError("Redis is unreachable in this test")

    with (
        override_settings(REDIS_URL=CLOSED_REDIS_URL),
        mock.patch.object(AbstractConnection, "connect_check_health", tripwire),
    ):
        yield attempts


def enqueue_one_of_each() -> dict[str, Job]:
    return {
        "completed": enqueue_job("probe.effect"),
        "failed": enqueue_job("probe.fail"),  # 3 attempts: two retries first
        "cancelled": enqueue_job("testing.cancel_self"),
        "chain": enqueue_job("testing.countdown", {"left": 1}),
        "task": Job.objects.get(id=probe.add.enqueue(1, 2).id),
    }


def test_the_tripwire_sees_a_redis_call():
    """The check below could fail: a Redis call under it is recorded."""
    from queue_app import broker

    with redis_unreachable() as attempts, pytest.raises(RedisConnectionError):
        broker.get_client().ping()
    assert attempts == ["127.0.0.1:1"]


@pytest.mark.django_db
def test_jobs_run_inside_the_tests_transaction_without_redis():
    jobs = enqueue_one_of_each()

    with redis_unreachable() as attempts:
        summary = run_jobs(with_scheduled=True)

    assert attempts == []
    assert summary == RunSummary(completed=4, retried=2, failed=1, cancelled=1)
    statuses = {name: Job.objects.get(id=job.id).status for name, job in jobs.items()}
    assert statuses == {
        "completed": "completed",
        "failed": "failed",
        "cancelled": "cancelled",
        "chain": "completed",
        "task": "completed",
    }
    assert Effect.objects.filter(job_id=jobs["completed"].id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_jobs_run_and_commit_in_a_transactional_test_without_redis():
    jobs = enqueue_one_of_each()

    with redis_unreachable() as attempts:
        summary = run_jobs(with_scheduled=True)

    assert attempts == []
    assert summary == RunSummary(completed=4, retried=2, failed=1, cancelled=1)
    # Committed: another connection sees every outcome.
    with sql.dedicated_connection() as other:
        rows = other.execute(
            "SELECT id::text, status FROM queue_app_jobs WHERE id = ANY(%s::uuid[])",
            [[str(job.id) for job in jobs.values()]],
        ).fetchall()
        effects = other.execute("SELECT count(*) FROM probe_effect").fetchone()[0]
    by_id = dict(rows)
    assert {name: by_id[str(job.id)] for name, job in jobs.items()} == {
        "completed": "completed",
        "failed": "failed",
        "cancelled": "cancelled",
        "chain": "completed",
        "task": "completed",
    }
    assert effects == 1
