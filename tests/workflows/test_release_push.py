"""A dependent released by a completion is pushed to its ready set at the completion's
commit, as an enqueue's jobs are (queue_app/engine/released.py): a chain's next step does
not wait for the relay. Its outbox row stays, for the relay to send if the push is lost."""

import pytest
from django.db import transaction

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app import broker
from queue_app.engine import execution
from queue_app.models import OutboxMessage
from queue_app.services import enqueue_job
from tests.helpers import claim_jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def in_line(client) -> list[str]:
    return [broker.member_job_id(member) for member in client.zrange(broker.priority_key("default"), 0, -1)]


def parent_and_child(client):
    parent = enqueue_job("wf.add")
    child = enqueue_job("wf.add", depends_on=[parent])
    (claimed,) = claim_jobs([str(parent.id)], worker_id="w")
    client.flushdb()  # whatever the enqueues pushed: only the release may put the child in line
    return claimed, child


def test_a_completion_pushes_the_dependent_it_released(redis_client):
    claimed, child = parent_and_child(redis_client)
    execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])
    assert in_line(redis_client) == [str(child.id)]
    # The safety net: the row is the relay's still.
    assert OutboxMessage.objects.get(job_id=child.id, action="enqueue").dispatched_at is None


def test_a_completion_written_with_the_next_claim_pushes_what_it_released(redis_client):
    claimed, child = parent_and_child(redis_client)
    other = enqueue_job("wf.add")
    redis_client.flushdb()
    execution.claim(
        [str(other.id)], worker_id="w", completions=[execution.Completion(claimed.id, claimed.fence, 1)]
    )
    assert in_line(redis_client) == [str(child.id)]


def test_a_completion_rolled_back_pushes_nothing(redis_client):
    claimed, child = parent_and_child(redis_client)
    with pytest.raises(RuntimeError), transaction.atomic():
        execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])
        raise RuntimeError("the caller's transaction fails")
    assert in_line(redis_client) == []


def test_a_completion_does_not_push_a_dependent_it_released_parked(redis_client):
    """A keyed dependent released while its key has a job in line waits out of Redis for its
    key's turn, as an enqueued one does (workflows_v2.sql)."""
    key_in_line = enqueue_job("wf.add", concurrency_key="k")
    parent = enqueue_job("wf.add")
    child = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k")
    (claimed,) = claim_jobs([str(parent.id)], worker_id="w")
    redis_client.flushdb()
    execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])
    assert in_line(redis_client) == []
    assert not OutboxMessage.objects.filter(job_id=child.id).exists()
    assert OutboxMessage.objects.filter(job_id=key_in_line.id, action="enqueue").exists()
