"""A row the relay sends late places its job as the job is now, never where the row said.

The enqueuer pushes a ready job itself after its commit; its outbox row waits
RELAY_GRACE_SECONDS as the safety net. If the job was cancelled and retried in the
meantime, that first row is stale: sent as written it would put the job back in
line at its first enqueue time, ahead of every job enqueued since.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queue_app import broker, services
from queue_app.models import Job, OutboxMessage
from queue_app.runtime.relay import Relay
from queue_app.services import enqueue_job
from tests.helpers import ready_ids

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def make_rows_due() -> None:
    """As if RELAY_GRACE_SECONDS (or a dead relay's claim) had run out."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_app_job_outbox SET dispatch_after = now() - interval '1 second'")


def member(job_id) -> str:
    return broker.ready_member(job_id, Job.objects.get(id=job_id).enqueued_at)


def ready_members(client) -> list[str]:
    return client.zrange(broker.priority_key("default"), 0, -1)


def test_a_stale_direct_row_sent_last_leaves_the_retried_job_behind_the_jobs_before_its_retry(
    redis_client,
):
    first = enqueue_job("demo.echo")  # pushed by its enqueuer; its row waits the grace
    old_place = member(first.id)
    second = enqueue_job("demo.echo")
    services.cancel_job(first.id)
    services.retry_job(first.id)
    assert Relay().drain() == 2  # the cancel's removal and the retry's enqueue
    assert ready_ids(redis_client) == [str(second.id), str(first.id)]

    make_rows_due()
    Relay().drain()  # the first (stale) row goes last

    # The retry's place, behind the second job: the first row did not put it back ahead.
    assert ready_members(redis_client) == [member(second.id), member(first.id)]
    assert old_place not in ready_members(redis_client)
    assert not OutboxMessage.objects.filter(dispatched_at=None).exists()


def test_a_direct_push_that_lands_after_the_cancel_is_taken_out_by_its_row(redis_client):
    """The enqueuer's push arrives late (its process stalled after the commit): after the
    cancel's removal and the retry's enqueue. The row it left behind takes it out."""
    job = enqueue_job("demo.echo")
    old_place = member(job.id)
    redis_client.flushdb()  # the push has not arrived yet
    services.cancel_job(job.id)
    services.retry_job(job.id)
    Relay().drain()
    redis_client.zadd(broker.priority_key("default"), {old_place: broker.ready_score(0)})  # now it does

    make_rows_due()
    Relay().drain()

    assert ready_members(redis_client) == [member(job.id)]


def test_a_stale_row_of_a_job_no_longer_queued_puts_nothing_back(redis_client):
    job = enqueue_job("demo.echo")
    services.cancel_job(job.id)
    Relay().drain()
    make_rows_due()
    assert Relay().drain() == 1
    assert ready_members(redis_client) == []
    assert redis_client.zcard(broker.retry_key("default")) == 0


def test_a_stale_schedule_row_does_not_put_a_job_retried_since_back_in_the_retry_set(
    redis_client, queue_config
):
    queue_config(DISPATCH_ON_COMMIT=False)
    job = enqueue_job("demo.echo", run_at=timezone.now() + timedelta(hours=1))
    # Its schedule row is claimed by a relay that then died: sent again only later.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_app_job_outbox SET dispatch_after = now() + interval '1 hour'")
    services.cancel_job(job.id)
    services.retry_job(job.id)  # ready now
    assert Relay().drain() == 2

    make_rows_due()
    assert Relay().drain() == 1

    assert ready_members(redis_client) == [member(job.id)]
    assert redis_client.zcard(broker.retry_key("default")) == 0


def test_the_relay_places_a_job_at_its_current_priority_not_the_rows(redis_client, queue_config):
    queue_config(DISPATCH_ON_COMMIT=False)
    job = enqueue_job("demo.echo", priority="low")
    # The job's priority as stored now (the row still says low).
    Job.objects.filter(id=job.id).update(priority_value=10)
    Relay().drain()
    assert redis_client.zscore(broker.priority_key("default"), member(job.id)) == broker.ready_score(10)
