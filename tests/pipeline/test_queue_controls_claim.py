"""The claim honours queue controls (engine level, one process, real PostgreSQL)."""

import threading
import uuid

import pytest
from django.db import connection, transaction

from queue_app.engine import execution
from queue_app.engine.controls import pause_queue, resume_queue, set_queue_limits
from queue_app.exceptions import InvalidQueueControl, UnknownQueue
from queue_app.models import Job, JobLog
from queue_app.services import enqueue_job

pytestmark = pytest.mark.redis


def _ids(count):
    return [str(enqueue_job("probe.run").id) for _ in range(count)]


@pytest.mark.django_db
def test_a_paused_queue_claims_nothing_and_holds_every_id_back():
    ids = _ids(3)
    pause_queue("default")
    claim = execution.claim(ids, worker_id="w")
    assert claim.jobs == []
    assert claim.held_back == {"default": ids}
    assert set(Job.objects.values_list("status", flat=True)) == {"queued"}
    assert not JobLog.objects.filter(event="claimed").exists()
    resume_queue("default")
    assert [job.id for job in execution.claim(ids, worker_id="w").jobs] == ids


@pytest.mark.django_db
def test_one_claim_takes_a_free_queues_jobs_and_holds_a_paused_queues_back(queue_config):
    """The short path claims the free queue's jobs; the full claim then holds the paused one's back."""
    queue_config(QUEUES="default,reports")
    free = _ids(2)
    paused = [str(enqueue_job("probe.run", queue="reports").id) for _ in range(2)]
    pause_queue("reports")
    ids = [free[0], paused[0], free[1], paused[1]]
    claim = execution.claim(ids, worker_id="w")
    assert [job.id for job in claim.jobs] == free
    assert claim.held_back == {"reports": paused}
    assert dict(Job.objects.values_list("id", "status")) == {
        **{uuid.UUID(pk): "processing" for pk in free},
        **{uuid.UUID(pk): "queued" for pk in paused},
    }
    claimed_logs = JobLog.objects.filter(event="claimed")
    assert sorted(str(pk) for pk in claimed_logs.values_list("job_id", flat=True)) == sorted(free)


@pytest.mark.django_db
def test_a_concurrency_limit_counts_jobs_already_processing():
    ids = _ids(5)
    set_queue_limits("default", concurrency_limit=2, rate_limit=None)
    first = execution.claim(ids[:1], worker_id="w", queues={"default": True})
    assert len(first.jobs) == 1
    second = execution.claim(ids[1:], worker_id="w", queues={"default": True})
    # One slot left: the first id in pop order takes it, the rest wait in line.
    assert [job.id for job in second.jobs] == ids[1:2]
    assert second.held_back == {"default": ids[2:]}
    assert Job.objects.filter(status="processing").count() == 2


@pytest.mark.django_db
def test_a_concurrency_limit_counts_jobs_being_cancelled_like_processing_ones():
    """A running job asked to cancel runs until its worker confirms the stop (DESIGN.md's
    ``processing --cancel--> cancelling --confirmed--> cancelled``), so it keeps its slot
    until then. The status is written directly: the claim reads nothing else of it."""
    ids = _ids(3)
    set_queue_limits("default", concurrency_limit=2, rate_limit=None)
    assert len(execution.claim(ids[:2], worker_id="w", queues={"default": True}).jobs) == 2
    Job.objects.filter(id=ids[0]).update(status="cancelling")
    held = execution.claim(ids[2:], worker_id="w", queues={"default": True})
    assert held.jobs == [] and held.held_back == {"default": ids[2:]}
    Job.objects.filter(id=ids[0]).update(status="cancelled")
    freed = execution.claim(ids[2:], worker_id="w", queues={"default": True})
    assert [job.id for job in freed.jobs] == ids[2:]


@pytest.mark.django_db
def test_a_limited_queue_claimed_without_its_exclusive_lock_gets_nothing():
    """A worker whose view of the controls is stale (it did not know of the limit) claims nothing."""
    ids = _ids(2)
    set_queue_limits("default", concurrency_limit=5, rate_limit=None)
    stale = execution.claim(ids, worker_id="w", queues={"default": False})
    assert stale.jobs == [] and stale.held_back == {"default": ids}
    # Looked up (no queues given): claimed.
    assert len(execution.claim(ids, worker_id="w").jobs) == 2


@pytest.mark.django_db
def test_a_rate_limit_spends_a_bucket_of_max_1_rate_tokens():
    ids = _ids(10)
    set_queue_limits("default", concurrency_limit=None, rate_limit=0.001)  # a token every 1000 s
    claim = execution.claim(ids, worker_id="w")
    assert len(claim.jobs) == 1  # the full bucket holds max(1, rate) = 1 token
    assert len(claim.held_back["default"]) == 9
    assert execution.claim(ids[1:], worker_id="w").jobs == []


@pytest.mark.django_db(transaction=True)
def test_pause_waits_for_a_claim_in_flight():
    """pause_queue returns only after a claim that holds the queue's lock has committed."""
    [job_id] = _ids(1)
    paused = threading.Event()

    def pause_in_thread():
        try:
            pause_queue("default")
            paused.set()
        finally:
            connection.close()

    with transaction.atomic():
        assert len(execution.claim([job_id], worker_id="w").jobs) == 1
        thread = threading.Thread(target=pause_in_thread)
        thread.start()
        # The pause blocks on the claim's lock: it cannot have returned before this commit.
        thread.join(timeout=0.5)
        assert not paused.is_set()
    thread.join(timeout=30)
    assert paused.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_claim_that_waited_for_a_pause_sees_it():
    """The claim reads the jobs and queues after its queue lock is granted, so a pause that
    committed while the claim waited holds its ids back (a read from before the wait would
    still see the queue running and claim)."""
    [job_id] = _ids(1)
    claims = []

    def claim_in_thread():
        try:
            claims.append(execution.claim([job_id], worker_id="w", queues={"default": False}))
        finally:
            connection.close()

    with transaction.atomic():
        pause_queue("default")  # its exclusive lock is held until this block commits
        thread = threading.Thread(target=claim_in_thread)
        thread.start()
        thread.join(timeout=0.5)
        assert claims == []  # the claim waits for the pause's lock
    thread.join(timeout=30)
    [claim] = claims
    assert claim.jobs == [] and claim.held_back == {"default": [job_id]}
    assert Job.objects.get(pk=job_id).status == "queued"


@pytest.mark.django_db
def test_bad_controls_name_the_field():
    with pytest.raises(UnknownQueue) as unknown:
        pause_queue("nope")
    assert unknown.value.field == "name"
    for kwargs, field in [
        ({"concurrency_limit": 0, "rate_limit": None}, "concurrency_limit"),
        ({"concurrency_limit": None, "rate_limit": float("nan")}, "rate_limit"),
        ({"concurrency_limit": None, "rate_limit": 0}, "rate_limit"),
    ]:
        with pytest.raises(InvalidQueueControl) as invalid:
            set_queue_limits("default", **kwargs)
        assert invalid.value.field == field
