"""Hand-backs on a strict-FIFO queue: unstarted jobs go back to the head of the list, in
claim order, ahead of every job enqueued after them (not appended to its tail)."""

import time

import pytest

from queue_app import broker
from queue_app.engine import execution, selectors
from queue_app.models import OutboxMessage
from queue_app.runtime.worker import Worker
from queue_app.services import enqueue_job
from tests.helpers import hold_batch, relay_all

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@pytest.fixture
def fifo_batch(queue_config, redis_client):
    """Ten jobs on a FIFO queue; a worker popped and claimed the first five and runs the first."""
    queue_config(QUEUES="default,bulk:fifo")
    ids = [str(enqueue_job("probe.order", queue="bulk").id) for _ in range(10)]
    relay_all()
    popped = broker.reserve(redis_client, "bulk", True, 5)
    assert popped == ids[:5]
    worker = Worker(worker_id="w", queues=["bulk"])
    claimed = execution.claim(popped, worker_id="w").jobs
    assert [job.id for job in claimed] == ids[:5]
    hold_batch(worker, claimed)
    return worker, ids


def fifo_list(redis_client) -> list[str]:
    return redis_client.lrange(broker.fifo_key("bulk"), 0, -1)


def test_a_stopping_workers_unstarted_jobs_go_back_to_the_head_in_order(fifo_batch, redis_client):
    worker, ids = fifo_batch
    worker._hand_back_unstarted("worker stopping before the job started")
    relay_all()
    assert fifo_list(redis_client) == ids[1:]
    rows = OutboxMessage.objects.filter(job_id__in=ids[1:5], action="enqueue", to_head=True)
    assert rows.count() == 4


def test_a_fifo_batch_behind_a_slow_job_is_not_released(fifo_batch, redis_client):
    """Handed back while its worker runs the slow job, the batch could be overtaken by that
    same worker's next pop (the jobs behind it) before the relay put it back: it stays."""
    worker, ids = fifo_batch
    worker._claimed_at = time.monotonic() - worker.release_after_seconds - 1
    worker.release_batch()
    relay_all()
    assert [a.job.id for a in worker.holdings.unstarted()] == ids[1:5]
    assert fifo_list(redis_client) == ids[5:]


def test_held_jobs_come_latest_enqueued_first_so_a_supervisors_hand_back_keeps_order(
    fifo_batch, redis_client
):
    """The supervisor (and a worker's clean exit) hand back in this order."""
    worker, ids = fifo_batch
    held = selectors.held_by("w")
    assert [job_id for job_id, _ in held] == list(reversed(ids[:5]))
    for job_id, fence in held:
        execution.hand_back_job(job_id, fence, worker_id="w", reason="its process died")
    relay_all()
    assert fifo_list(redis_client) == ids


def test_a_plain_enqueue_still_appends_to_the_tail(fifo_batch, redis_client):
    worker, ids = fifo_batch
    later = str(enqueue_job("probe.order", queue="bulk").id)
    relay_all()
    assert fifo_list(redis_client) == [*ids[5:], later]
