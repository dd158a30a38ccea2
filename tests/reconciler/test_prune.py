"""Prune: ids in Redis whose job is missing, finished or misplaced are removed; queued ones stay."""

import uuid

import pytest

from queue_app import broker, services
from queue_app.engine import execution
from queue_app.engine.execution import Completion
from queue_app.runtime.reconciler import Reconciler
from tests.helpers import claim_jobs, ready_ids, ready_score
from tests.reconciler.support import enqueue, expected_member, mark_relayed

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def completed_job():
    (job,) = enqueue(1)
    (claimed,) = claim_jobs([str(job.id)], worker_id="w1")
    assert execution.complete_jobs([Completion(claimed.id, claimed.fence, {"ok": True})])
    return str(job.id)


def test_stale_ids_are_removed_from_every_structure_and_queued_ones_kept(redis_client):
    queued_job, queued_fifo = enqueue(1)[0], str(enqueue(1, queue="bulk")[0].id)
    queued = str(queued_job.id)
    finished = completed_job()
    cancelled = str(enqueue(1)[0].id)
    services.cancel_job(cancelled)
    mark_relayed()
    unknown = str(uuid.uuid4())
    priority, fifo, retry = (
        broker.priority_key("default"),
        broker.fifo_key("bulk"),
        broker.retry_key("default"),
    )
    # Stale members come bare or with an enqueue time; the queued job's own member stays.
    redis_client.zadd(
        priority,
        {expected_member(queued_job): 1, unknown: 2, f"0000000000000001:{finished}": 3, "not-a-uuid": 4},
    )
    redis_client.zadd(retry, {cancelled: 5, finished: 6})
    # Pushed twice (a relay re-send): duplicates of a queued job are harmless and stay.
    redis_client.rpush(fifo, finished, queued_fifo, unknown, finished, queued_fifo, cancelled, finished)

    report = Reconciler(batch_size=2).run_once()

    assert ready_ids(redis_client) == [queued]
    assert redis_client.zrange(retry, 0, -1) == []
    assert redis_client.lrange(fifo, 0, -1) == [queued_fifo, queued_fifo]
    # priority: unknown, finished, garbage; retry: cancelled, finished; fifo: finished (three
    # entries, each counted), unknown, cancelled
    assert report.counts["removed_stale"] == 10
    assert report.counts["restored_ready"] == 0


def test_misplaced_ids_are_moved_where_their_queue_expects_them(redis_client):
    default_job = str(enqueue(1)[0].id)
    bulk_job = str(enqueue(1, queue="bulk")[0].id)
    mark_relayed()
    # In another queue's list, and in the priority set of a FIFO queue: no worker pops either.
    redis_client.rpush(broker.fifo_key("bulk"), default_job)
    redis_client.zadd(broker.priority_key("bulk"), {bulk_job: 1})

    report = Reconciler().run_once()

    assert report.counts["removed_stale"] == 2
    assert report.counts["restored_ready"] == 2
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == [bulk_job]
    assert ready_ids(redis_client) == [default_job]
    assert redis_client.zcard(broker.priority_key("bulk")) == 0


def test_ids_with_an_undispatched_outbox_row_are_left_to_the_relay(redis_client):
    job = str(enqueue(1)[0].id)
    mark_relayed()
    services.cancel_job(job)  # its 'remove' row is not relayed yet
    redis_client.zadd(broker.priority_key("default"), {job: 1})

    report = Reconciler().run_once()

    assert report.counts["removed_stale"] == 0
    assert report.counts["skipped_relay_pending"] == 1
    assert ready_score(redis_client, job) == 1


def test_a_long_fifo_list_is_pruned_across_chunks(redis_client):
    keep = [str(job.id) for job in enqueue(5, queue="bulk")]
    mark_relayed()
    junk = [str(uuid.uuid4()) for _ in range(12)]
    interleaved = [item for pair in zip(junk, keep + keep + keep[:2], strict=True) for item in pair]
    redis_client.rpush(broker.fifo_key("bulk"), *interleaved)

    report = Reconciler(batch_size=3).run_once()

    assert report.counts["removed_stale"] == 12
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == keep + keep + keep[:2]
