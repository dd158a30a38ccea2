"""DISPATCH_ON_COMMIT: the enqueuing process pushes a ready job to Redis right after its
commit; the outbox row stays as the safety net the relay checks RELAY_GRACE_SECONDS later."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from queue_app import broker
from queue_app.engine import stats
from queue_app.models import Job, OutboxMessage
from queue_app.runtime.relay import Relay
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import claim_jobs, ready_ids

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def make_rows_due() -> None:
    """As if RELAY_GRACE_SECONDS had passed since the jobs were enqueued."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_app_job_outbox SET dispatch_after = now() - interval '1 second'")


def test_a_ready_job_is_in_redis_when_enqueue_returns_and_the_relay_leaves_its_row(redis_client):
    job = enqueue_job("demo.echo")
    assert ready_ids(redis_client) == [str(job.id)]
    # A worker blocked on the queue is woken by the push, not by a relay.
    assert redis_client.llen(broker.wake_key("default")) == 1
    row = OutboxMessage.objects.get(job=job)
    assert row.dispatched_at is None and row.dispatch_after > timezone.now()
    assert Relay().drain() == 0  # within its grace: not the relay's yet


def test_bulk_enqueue_pushes_every_job_in_one_go(redis_client):
    jobs = enqueue_jobs([JobRequest(type="demo.echo", priority=p) for p in ("low", "high", "medium")])
    assert ready_ids(redis_client) == [str(jobs[1].id), str(jobs[2].id), str(jobs[0].id)]
    assert not OutboxMessage.objects.filter(dispatch_after__isnull=True).exists()


def test_inside_a_transaction_the_push_waits_for_the_commit(redis_client):
    with transaction.atomic():
        job = enqueue_job("demo.echo")
        assert ready_ids(redis_client) == []  # a worker must not pop what it cannot see
    assert ready_ids(redis_client) == [str(job.id)]


def test_a_rolled_back_transaction_pushes_nothing(redis_client):
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_job("demo.echo")
        raise RuntimeError("the caller's transaction fails")
    assert redis_client.dbsize() == 0
    assert not Job.objects.exists()


def test_a_push_lost_before_it_reached_redis_is_sent_by_the_relay_after_the_grace(redis_client):
    """The crash window: committed, then the process died (here: Redis lost the push)."""
    job = enqueue_job("demo.echo")
    redis_client.flushdb()
    assert Relay().drain() == 0
    make_rows_due()
    assert Relay().drain() == 1
    assert ready_ids(redis_client) == [str(job.id)]
    assert OutboxMessage.objects.get(job=job).dispatched_at is not None


def test_redis_down_at_enqueue_still_creates_the_job_and_the_relay_sends_it(redis_client, settings):
    reachable, settings.REDIS_URL = settings.REDIS_URL, "redis://127.0.0.1:1/0"  # nothing listens there
    job = enqueue_job("demo.echo")  # PostgreSQL is the record: the enqueue succeeds
    settings.REDIS_URL = reachable
    assert Job.objects.get(id=job.id).status == "queued"
    make_rows_due()
    assert Relay().drain() == 1
    assert ready_ids(redis_client) == [str(job.id)]


def test_the_push_does_not_wait_for_its_answer_and_the_next_one_reads_it(redis_client):
    first = enqueue_job("demo.echo")
    sender = broker.push._sender(redis_client)
    assert sender.unread == 1  # written, not yet answered
    second = enqueue_job("demo.echo")
    assert sender.unread == 1  # the first answer read before the second push went out
    assert ready_ids(redis_client) == [str(first.id), str(second.id)]


def test_a_push_on_a_connection_redis_closed_goes_out_on_a_new_one(redis_client):
    enqueue_job("demo.echo")
    sender = broker.push._sender(redis_client)
    sender.read_replies()
    redis_client.client_kill_filter(_id=_client_id(sender))
    job = enqueue_job("demo.echo")
    assert str(job.id) in ready_ids(redis_client)


def _client_id(sender) -> int:
    """The Redis client id of the sender's connection (every answer on it already read)."""
    sender.connection.send_command("CLIENT", "ID")
    return int(sender.connection.read_response())


def test_an_error_answer_is_logged_and_later_pushes_still_land(redis_client, caplog):
    redis_client.set(broker.priority_key("default"), "not a sorted set")
    enqueue_job("demo.echo")  # its push fails in Redis (WRONGTYPE): the relay will send it
    redis_client.delete(broker.priority_key("default"))
    job = enqueue_job("demo.echo")
    assert ready_ids(redis_client) == [str(job.id)]
    make_rows_due()
    assert Relay().drain() == 2
    assert len(ready_ids(redis_client)) == 2


def test_the_relay_does_not_send_again_a_job_already_claimed(redis_client):
    queued, claimed = enqueue_job("demo.echo"), enqueue_job("demo.echo")
    popped = broker.reserve(redis_client, "default", False, 2)
    assert sorted(popped) == sorted([str(queued.id), str(claimed.id)])
    [taken] = claim_jobs([str(claimed.id)], worker_id="w")
    assert taken.id == str(claimed.id)
    make_rows_due()
    assert Relay().drain() == 2  # both rows settled...
    assert ready_ids(redis_client) == [str(queued.id)]  # ...only the waiting job sent again
    assert not OutboxMessage.objects.filter(dispatched_at__isnull=True).exists()


def test_fifo_queues_and_scheduled_jobs_go_through_the_relay(redis_client, queue_config):
    queue_config(QUEUES={"default": False, "bulk": True})
    fifo = enqueue_job("demo.echo", queue="bulk")
    later = enqueue_job("demo.echo", run_at=timezone.now() + timedelta(hours=1))
    assert redis_client.dbsize() == 0  # the relay keeps a FIFO list in outbox order
    rows = OutboxMessage.objects.filter(job__in=[fifo, later])
    assert [row.dispatch_after for row in rows] == [None, None]
    assert Relay().drain() == 2
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == [str(fifo.id)]
    assert redis_client.zscore(broker.retry_key("default"), str(later.id)) is not None


def test_off_every_job_waits_for_the_relay(redis_client, queue_config):
    queue_config(DISPATCH_ON_COMMIT=False)
    job = enqueue_job("demo.echo")
    assert redis_client.dbsize() == 0
    assert Relay().drain() == 1
    assert ready_ids(redis_client) == [str(job.id)]


def test_a_repeated_idempotency_key_pushes_nothing_new(redis_client):
    first = enqueue_job("demo.echo", idempotency_key="k")
    redis_client.flushdb()
    again = enqueue_job("demo.echo", idempotency_key="k")
    assert again.id == first.id and not again.was_created
    assert redis_client.dbsize() == 0


def test_the_outbox_backlog_counts_a_pushed_row_only_once_its_grace_is_over(redis_client):
    enqueue_job("demo.echo")
    assert stats.queue_stats().outbox_backlog == {}  # in Redis already: nothing to relay
    make_rows_due()
    [(pending, oldest)] = stats.queue_stats().outbox_backlog.values()
    # Waiting for the relay since its grace ended, not since the job was created.
    assert pending == 1 and oldest == OutboxMessage.objects.get().dispatch_after


def test_the_admin_shows_a_row_its_enqueuer_pushed(redis_client, admin_client):
    enqueue_job("demo.echo")
    page = admin_client.get("/admin/queue_app/outboxmessage/").content.decode()
    assert "outbox-state-pushed" in page and "outbox-state-pending" not in page
