"""Maintenance under one leader per queue: the election by lease rows, and the chores
(in-flight sweep, promotion, lease rescue) done by the leader only.

Real PostgreSQL and Redis, in-process candidates; the process tests
(tests/processes/test_maintenance_leader.py) kill real workers. As Oban's
peer tests do, leases are seeded just either side of their expiry.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.utils import timezone
from structlog.testing import capture_logs

from queue_app import broker
from queue_app.models import Job, JobLog, MaintenanceLease, OutboxMessage
from queue_app.runtime import maintenance
from queue_app.runtime.maintenance import Maintenance
from queue_app.states import Status
from tests.helpers import claim_jobs, ready_ids
from tests.reconciler.support import enqueue, mark_relayed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@pytest.fixture(autouse=True)
def every_tick_does_everything(monkeypatch, queue_config):
    """Each tick elects, sweeps and rescues: no waiting on the cadences."""
    queue_config(QUEUES={"default": False, "bulk": True}, LEASE_RESCUE_SECONDS=0.001)
    monkeypatch.setattr(maintenance, "ELECTION_SECONDS", 0)
    monkeypatch.setattr(maintenance, "SWEEP_SECONDS", 0)


def lease_ends_in(seconds: float, queue: str = "default") -> None:
    """As if the holder last renewed so that its lease ends ``seconds`` from the database's now()."""
    MaintenanceLease.objects.filter(queue=queue).update(expires_at=Now() + timedelta(seconds=seconds))


def holder(queue: str = "default") -> str:
    return MaintenanceLease.objects.get(queue=queue).holder


def test_one_candidate_leads_and_another_takes_over_only_once_the_lease_expired(redis_client):
    first, second, third = (Maintenance(["default"], holder=name) for name in ("a", "b", "c"))
    for candidate in (first, second, third):
        candidate.tick(redis_client)
    assert (first.leading, second.leading, third.leading) == ({"default"}, set(), set())
    assert holder() == "a"

    lease_ends_in(+1)  # the holder stopped renewing, but its lease has not run out
    second.tick(redis_client)
    assert second.leading == set() and holder() == "a"

    lease_ends_in(-0.001)  # just run out
    with capture_logs() as logs:
        second.tick(redis_client)
        third.tick(redis_client)
        first.tick(redis_client)  # back from a stall: it finds the lease taken
    assert (first.leading, second.leading, third.leading) == (set(), {"default"}, set())
    assert holder() == "b"
    events = [
        (entry["event"], entry["holder"]) for entry in logs if entry["event"].startswith("maintenance_")
    ]
    assert events == [("maintenance_leader_elected", "b"), ("maintenance_leadership_lost", "a")]


def test_a_leader_renews_its_lease_and_a_resigning_one_hands_over_at_once(redis_client):
    first, second = Maintenance(["default"], holder="a"), Maintenance(["default"], holder="b")
    first.tick(redis_client)
    lease_ends_in(-0.001)
    first.tick(redis_client)  # renewed by the holder before anyone else asked
    second.tick(redis_client)
    assert first.leading == {"default"} and second.leading == set()
    assert MaintenanceLease.objects.filter(queue="default", expires_at__gt=timezone.now()).exists()

    first.resign()
    assert holder() == ""
    second.tick(redis_client)
    assert second.leading == {"default"} and holder() == "b"


def test_leases_are_per_queue(redis_client):
    both = Maintenance(["default", "bulk"], holder="both")
    bulk_only = Maintenance(["bulk"], holder="bulk-only")
    bulk_only.tick(redis_client)
    both.tick(redis_client)
    assert both.leading == {"default"} and bulk_only.leading == {"bulk"}


def test_candidates_asking_at_the_same_moment_elect_exactly_one(redis_client):
    """Six threads, each with its own PostgreSQL session, ask for one expired lease at once."""
    candidates = [Maintenance(["default"], holder=f"c{i}") for i in range(6)]
    candidates[0].tick(redis_client)  # the row exists, held by c0 ...
    for _ in range(5):
        lease_ends_in(-1)  # ... whose lease ran out
        start = threading.Barrier(len(candidates))
        errors: list[BaseException] = []

        def elect(candidate: Maintenance, start=start, errors=errors) -> None:
            try:
                start.wait()
                candidate.tick(redis_client)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=elect, args=(candidate,)) for candidate in candidates]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors
        leaders = [candidate.holder for candidate in candidates if candidate.leading]
        assert len(leaders) == 1 and leaders == [holder()]


def test_only_the_leader_promotes_due_retries_and_returns_expired_pops(redis_client, monkeypatch):
    leader, other = Maintenance(["default"], holder="leader"), Maintenance(["default"], holder="other")
    leader.tick(redis_client)
    # A job whose retry fell due, in the retry set ...
    (due,) = enqueue(1, run_at=timezone.now() + timedelta(hours=1))
    mark_relayed()
    Job.objects.filter(id=due.id).update(next_retry_at=Now())
    redis_client.zadd(broker.retry_key("default"), {str(due.id): 0})
    # ... and one popped by a worker that died before its claim.
    (popped,) = enqueue(1)
    mark_relayed()
    redis_client.zadd(
        broker.priority_key("default"), {broker.ready_member(str(popped.id), popped.enqueued_at): 0}
    )
    monkeypatch.setattr("queue_app.broker.ready.INFLIGHT_SECONDS", 0)
    assert broker.reserve(redis_client, "default", False, 1) == [str(popped.id)]

    other.tick(redis_client)
    assert other.leading == set()
    assert redis_client.zscore(broker.retry_key("default"), str(due.id)) == 0
    assert ready_ids(redis_client) == []

    leader.tick(redis_client)
    assert redis_client.zcard(broker.retry_key("default")) == 0
    assert redis_client.zcard(broker.inflight_key("default")) == 0
    assert sorted(ready_ids(redis_client)) == sorted([str(due.id), str(popped.id)])


def running(queue: str, *, lease_offset_seconds: float) -> str:
    """A claimed job of ``queue`` whose lease ends that long from the database's now()."""
    (job,) = enqueue(1, queue=queue)
    mark_relayed()
    (claimed,) = claim_jobs([str(job.id)], worker_id="dead-worker")
    Job.objects.filter(id=claimed.id).update(lease_expires_at=Now() + timedelta(seconds=lease_offset_seconds))
    return claimed.id


def test_the_leader_rescues_expired_leases_of_the_queues_it_leads(redis_client):
    expired = running("default", lease_offset_seconds=-0.001)
    still_held = running("default", lease_offset_seconds=+5)
    other_queue = running("bulk", lease_offset_seconds=-0.001)
    follower = Maintenance(["default"], holder="follower")
    leader = Maintenance(["default"], holder="leader")
    leader.tick(redis_client)
    follower.tick(redis_client)
    assert follower.leading == set()

    requeued = Job.objects.get(id=expired)
    assert requeued.status == Status.QUEUED and requeued.attempts == 1 and requeued.next_retry_at
    assert JobLog.objects.filter(job_id=expired, event="lease_expired_requeued").count() == 1
    # Its way back to Redis is an outbox row, for the relay.
    assert OutboxMessage.objects.filter(job_id=expired, action="schedule", dispatched_at=None).count() == 1
    assert Job.objects.get(id=still_held).status == Status.PROCESSING
    assert Job.objects.get(id=other_queue).status == Status.PROCESSING  # not a queue it leads


def test_a_tick_while_not_due_asks_nothing_of_either_store(
    redis_client, monkeypatch, django_assert_num_queries
):
    monkeypatch.setattr(maintenance, "ELECTION_SECONDS", 60)
    monkeypatch.setattr(maintenance, "SWEEP_SECONDS", 60)
    candidate = Maintenance(["default"], holder="a")
    candidate.rescue_seconds = 60
    candidate.tick(redis_client)
    assert candidate.leading == {"default"}
    # No client at all: any Redis call would raise.
    with django_assert_num_queries(0):
        for _ in range(100):
            candidate.tick(None)
