"""A batch released behind a slow job while PostgreSQL fails: what is not handed back stays
the worker's to run, instead of being held (its lease extended) and never started."""

import time

import psycopg
import pytest
from django.db import OperationalError, connection

from queue_app import broker
from queue_app.engine import execution
from queue_app.models import Job
from queue_app.runtime.producer import ACK_DELAY_SECONDS
from queue_app.runtime.worker import Worker
from queue_app.services import enqueue_job
from tests.helpers import hold_batch, ready_ids, relay_all

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def test_jobs_a_failed_release_did_not_hand_back_stay_to_run(redis_client):
    ids = [str(enqueue_job("probe.run").id) for _ in range(4)]
    relay_all()
    popped = broker.reserve(redis_client, "default", False, 4)
    worker = Worker(worker_id="w", queues=["default"])
    claimed = execution.claim(popped, worker_id="w").jobs
    assert sorted(job.id for job in claimed) == sorted(ids)
    hold_batch(worker, claimed)
    worker._claimed_at = time.monotonic() - worker.release_after_seconds - 1

    # The second job's hand-back fails: its row is locked elsewhere and the wait times out.
    blocker = psycopg.connect(**connection.get_connection_params())
    try:
        blocker.execute("SELECT 1 FROM queue_app_jobs WHERE id = %s FOR UPDATE", [claimed[2].id])
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = '300ms'")
        with pytest.raises(OperationalError):
            worker.release_batch()
    finally:
        blocker.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")

    assert Job.objects.get(id=claimed[1].id).status == "queued"  # handed back before the failure
    assert [a.job.id for a in worker.holdings.unstarted()] == [claimed[2].id, claimed[3].id]
    # The next release (the heartbeat's next beat) hands them back.
    worker.release_batch()
    assert worker.holdings.unstarted() == []
    statuses = dict(Job.objects.filter(id__in=ids).values_list("id", "status"))
    assert {str(job_id): status for job_id, status in statuses.items()} == {
        claimed[0].id: "processing",
        claimed[1].id: "queued",
        claimed[2].id: "queued",
        claimed[3].id: "queued",
    }
    assert {a.job.id for a in worker.holdings.all()} == {claimed[0].id}


@pytest.mark.parametrize("hand_back", ["release", "stop"])
def test_a_late_acknowledgement_does_not_take_a_handed_back_jobs_next_pop(redis_client, hand_back):
    """Claimed ids are acknowledged late (the next pop, or the heartbeat after
    ACK_DELAY_SECONDS). Sent after a hand-back, the acknowledgement would remove the entry of
    the job's next pop, another worker's: were that claim held back (a rate limit), its
    put_back would find nothing, and the queued job would be in no Redis structure."""
    for _ in range(2):
        enqueue_job("probe.run")
    relay_all()
    popped = broker.reserve(redis_client, "default", False, 2)
    worker = Worker(worker_id="a", queues=["default"])
    claimed = execution.claim(popped, worker_id="a").jobs
    worker.producer._defer_acknowledgement({"default": popped})  # as after every claim
    hold_batch(worker, claimed)
    handed_back = claimed[1].id

    if hand_back == "release":
        worker._claimed_at = time.monotonic() - worker.release_after_seconds - 1
        worker.release_batch()
    else:
        worker._hand_back_unstarted("worker stopping before the job started")
    relay_all()
    assert broker.reserve(redis_client, "default", False, 5) == [handed_back]  # worker B
    worker.producer._unacknowledged_since -= ACK_DELAY_SECONDS
    worker.producer.acknowledge_overdue()  # worker A's heartbeat

    assert redis_client.zscore(broker.inflight_key("default"), handed_back) is not None
    assert broker.put_back(redis_client, "default", False, [handed_back]) == 1
    assert ready_ids(redis_client) == [handed_back]
