"""Expiry and per-key limits in the claim (engine level, real PostgreSQL and Redis)."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from queue_app.engine import execution
from queue_app.engine.controls import set_queue_limits
from queue_app.exceptions import InvalidJob, InvalidQueueControl, TransitionNotAllowed
from queue_app.models import Job, JobLog, KeyBucket
from queue_app.services import cancel_job, enqueue_job

pytestmark = pytest.mark.redis


def _expire_now(job_id) -> None:
    """Move a job's expiry into the past (the database clock decides, as in the claim)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_jobs SET expires_at = now() - interval '1 second' WHERE id = %s", [str(job_id)]
        )


@pytest.mark.django_db
def test_an_expired_job_popped_is_not_run_and_is_settled_as_expired():
    job = enqueue_job("probe.run", expires_in=60)
    assert job.expires_at is not None
    _expire_now(job.id)
    claim = execution.claim([str(job.id)], worker_id="w")
    assert claim.jobs == [] and claim.held_back == {}
    job.refresh_from_db()
    assert job.status == "expired"
    assert job.attempts == 0 and job.started_at is None and job.completed_at is not None
    assert list(job.logs.values_list("event", flat=True)) == ["enqueued", "expired"]


@pytest.mark.django_db
def test_a_job_before_its_expiry_is_claimed_and_an_expired_one_beside_it_is_not():
    live = enqueue_job("probe.run", expires_at=timezone.now() + timedelta(hours=1))
    gone = enqueue_job("probe.run", expires_in=60)
    _expire_now(gone.id)
    claim = execution.claim([str(gone.id), str(live.id)], worker_id="w")
    assert [j.id for j in claim.jobs] == [str(live.id)]
    assert dict(Job.objects.values_list("id", "status")) == {live.id: "processing", gone.id: "expired"}


@pytest.mark.django_db
def test_expiry_is_checked_on_a_limited_queue_too():
    set_queue_limits("default", concurrency_limit=5)
    job = enqueue_job("probe.run", expires_in=60)
    _expire_now(job.id)
    claim = execution.claim([str(job.id)], worker_id="w", queues={"default": True})
    assert claim.jobs == [] and claim.held_back == {}
    assert Job.objects.get(id=job.id).status == "expired"


@pytest.mark.django_db
def test_expiry_fields_are_checked():
    with pytest.raises(InvalidJob) as both:
        enqueue_job("probe.run", expires_in=5, expires_at=timezone.now())
    assert both.value.field == "expires_in"
    with pytest.raises(InvalidJob) as naive:
        enqueue_job("probe.run", expires_at=timezone.now().replace(tzinfo=None))
    assert naive.value.field == "expires_at"
    for bad in (0, -1, float("nan"), True, "5"):
        with pytest.raises(InvalidJob) as wrong:
            enqueue_job("probe.run", expires_in=bad)
        assert wrong.value.field == "expires_in"
    with pytest.raises(InvalidJob) as key:
        enqueue_job("probe.run", concurrency_key="")
    assert key.value.field == "concurrency_key"
    assert not Job.objects.exists()


def _claim_and_cancel_at_once(job_id: str) -> dict:
    """A claim and a cancel of one job, started together on two connections."""
    barrier = threading.Barrier(2)
    results: dict = {}

    def claim():
        barrier.wait()
        try:
            results["claim"] = execution.claim([job_id], worker_id="w")
        finally:
            connection.close()

    def cancel():
        barrier.wait()
        try:
            results["cancel"] = cancel_job(job_id)
        except TransitionNotAllowed as exc:
            results["cancel"] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=claim), threading.Thread(target=cancel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.django_db(transaction=True)
def test_expiry_racing_a_cancel_settles_the_job_once():
    """The claim's expiry and a cancel are both compare-and-set on 'queued': whichever
    commits first wins, the other changes nothing, and the trail shows one end."""
    for _ in range(5):
        job = enqueue_job("probe.run", expires_in=60)
        _expire_now(job.id)
        results = _claim_and_cancel_at_once(str(job.id))
        job.refresh_from_db()
        assert job.status in ("expired", "cancelled")
        assert results["claim"].jobs == []
        # The cancel that lost to the expiry is refused (a 409 to the API), never a crash.
        assert isinstance(results["cancel"], TransitionNotAllowed) == (job.status == "expired")
        ends = list(job.logs.filter(event__in=("expired", "cancelled")).values_list("event", flat=True))
        assert ends == [job.status]
        assert not job.logs.filter(event="claimed").exists()


@pytest.mark.django_db
def test_a_key_concurrency_limit_holds_back_only_that_keys_extra_jobs():
    set_queue_limits("default", key_concurrency_limit=1)
    a = [str(enqueue_job("probe.run", concurrency_key="customer:a").id) for _ in range(3)]
    b = [str(enqueue_job("probe.run", concurrency_key="customer:b").id) for _ in range(2)]
    plain = str(enqueue_job("probe.run").id)
    ids = [a[0], a[1], b[0], a[2], b[1], plain]
    claim = execution.claim(ids, worker_id="w", queues={"default": True})
    assert [j.id for j in claim.jobs] == [a[0], b[0], plain]
    assert claim.held_back == {"default": [a[1], a[2], b[1]]}
    # Running jobs of a key count in the next claim; another key's finish frees nothing of it.
    again = execution.claim([a[1], b[1]], worker_id="w", queues={"default": True})
    assert again.jobs == []
    Job.objects.filter(id=a[0]).update(status="completed")
    freed = execution.claim([a[1], b[1]], worker_id="w", queues={"default": True})
    assert [j.id for j in freed.jobs] == [a[1]]


@pytest.mark.django_db
def test_a_cancelling_job_holds_its_keys_slot():
    set_queue_limits("default", key_concurrency_limit=1)
    first, second = (str(enqueue_job("probe.run", concurrency_key="k").id) for _ in range(2))
    assert len(execution.claim([first], worker_id="w", queues={"default": True}).jobs) == 1
    Job.objects.filter(id=first).update(status="cancelling")
    assert execution.claim([second], worker_id="w", queues={"default": True}).jobs == []


@pytest.mark.django_db
def test_a_key_rate_limit_spends_one_bucket_per_key():
    set_queue_limits("default", key_rate_limit=0.001)  # burst 1, then one start per 1000 s
    a = [str(enqueue_job("probe.run", concurrency_key="a").id) for _ in range(2)]
    b = str(enqueue_job("probe.run", concurrency_key="b").id)
    claim = execution.claim([a[0], a[1], b], worker_id="w", queues={"default": True})
    assert [j.id for j in claim.jobs] == [a[0], b]
    assert claim.held_back == {"default": [a[1]]}
    tokens = dict(KeyBucket.objects.values_list("key", "tokens"))
    assert set(tokens) == {"a", "b"} and all(value < 0.01 for value in tokens.values())
    # Setting the rate again refills every key's bucket.
    set_queue_limits("default", key_rate_limit=0.001)
    assert not KeyBucket.objects.exists()
    assert [j.id for j in execution.claim([a[1]], worker_id="w", queues={"default": True}).jobs] == [a[1]]


@pytest.mark.django_db
def test_a_worker_that_did_not_know_of_key_limits_takes_nothing_of_the_queue():
    set_queue_limits("default", key_concurrency_limit=1)
    job = str(enqueue_job("probe.run", concurrency_key="k").id)
    claim = execution.claim([job], worker_id="w", queues={"default": False})
    assert claim.jobs == [] and claim.held_back == {"default": [job]}


@pytest.mark.django_db
def test_keys_on_a_queue_without_key_limits_claim_as_plain_jobs():
    ids = [str(enqueue_job("probe.run", concurrency_key="same").id) for _ in range(3)]
    claim = execution.claim(ids, worker_id="w")
    assert [j.id for j in claim.jobs] == ids
    assert not KeyBucket.objects.exists()


@pytest.mark.django_db
def test_key_limits_are_checked():
    with pytest.raises(InvalidQueueControl) as error:
        set_queue_limits("default", key_concurrency_limit=0)
    assert error.value.field == "key_concurrency_limit"
    with pytest.raises(InvalidQueueControl) as error:
        set_queue_limits("default", key_rate_limit=-1)
    assert error.value.field == "key_rate_limit"


@pytest.mark.django_db
def test_a_claim_of_plain_jobs_never_reads_the_key_buckets():
    """Jobs without a key take the short path: no lock, no row of job_key_buckets."""
    set_queue_limits("default", key_rate_limit=1)
    ids = [str(enqueue_job("probe.run").id) for _ in range(2)]
    with transaction.atomic():
        claim = execution.claim(ids, worker_id="w", queues={"default": True})
    assert len(claim.jobs) == 2
    assert not KeyBucket.objects.exists()
    assert JobLog.objects.filter(event="claimed").count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_maintenance_leader_settles_expired_jobs_no_worker_popped(
    redis_client, queue_config, monkeypatch
):
    from queue_app.models import OutboxMessage
    from queue_app.runtime import maintenance
    from queue_app.runtime.maintenance import Maintenance

    queue_config(QUEUES={"default": False, "bulk": True}, LEASE_RESCUE_SECONDS=0.001)
    monkeypatch.setattr(maintenance, "ELECTION_SECONDS", 0)
    gone = enqueue_job("probe.run", expires_in=60)
    later = enqueue_job("probe.run", expires_in=3600)
    other_queue = enqueue_job("probe.run", queue="bulk", expires_in=60)
    plain = enqueue_job("probe.run")
    _expire_now(gone.id)
    _expire_now(other_queue.id)
    Maintenance(["default"], holder="leader").tick(redis_client)
    assert dict(Job.objects.values_list("id", "status")) == {
        gone.id: "expired",
        later.id: "queued",
        other_queue.id: "queued",  # not a queue it leads
        plain.id: "queued",
    }
    assert JobLog.objects.filter(job_id=gone.id, event="expired").count() == 1
    # Its id leaves Redis through the outbox, as a cancel's does.
    assert OutboxMessage.objects.filter(job_id=gone.id, action="remove").count() == 1


@pytest.mark.django_db
def test_the_reconciler_settles_expired_jobs_of_every_queue(redis_client):
    from queue_app.runtime.reconciler import Reconciler

    gone = enqueue_job("probe.run", expires_in=60)
    _expire_now(gone.id)
    dry = Reconciler(dry_run=True).run_once()
    assert dry.counts["expired"] == 1 and Job.objects.get(id=gone.id).status == "queued"
    report = Reconciler().run_once()
    assert report.counts["expired"] == 1
    assert Job.objects.get(id=gone.id).status == "expired"


def _outbox_actions(job_id) -> list[str]:
    from queue_app.models import OutboxMessage

    return list(OutboxMessage.objects.filter(job_id=job_id).values_list("action", flat=True))


@pytest.mark.django_db
def test_a_keys_jobs_park_behind_its_job_in_line_and_each_claim_gives_the_next_its_turn():
    first, second, third = (enqueue_job("probe.run", concurrency_key="k") for _ in range(3))
    other = enqueue_job("probe.run", concurrency_key="other")
    parked = dict(Job.objects.values_list("id", "parked"))
    assert parked == {first.id: False, second.id: True, third.id: True, other.id: False}
    # Only the jobs in line are sent to Redis.
    assert _outbox_actions(first.id) == ["enqueue"] and _outbox_actions(second.id) == []
    before = Job.objects.get(id=second.id).enqueued_at
    assert [j.id for j in execution.claim([str(first.id)], worker_id="w").jobs] == [str(first.id)]
    second.refresh_from_db()
    # Its turn: out of the park, at the back of the line, on its way to Redis.
    assert not second.parked and second.enqueued_at > before
    assert _outbox_actions(second.id) == ["enqueue"]
    assert Job.objects.get(id=third.id).parked


@pytest.mark.django_db
def test_a_scheduled_keyed_job_does_not_park_and_a_bulk_call_parks_its_own_followers():
    enqueue_job("probe.run", concurrency_key="k", run_at=timezone.now() + timedelta(hours=1))
    from queue_app.services import JobRequest, enqueue_jobs

    jobs = enqueue_jobs([JobRequest("probe.run", concurrency_key="k") for _ in range(3)])
    assert [Job.objects.get(id=j.id).parked for j in jobs] == [False, True, True]
    assert [j.parked for j in jobs] == [False, True, True]
    assert Job.objects.filter(parked=False).count() == 2


@pytest.mark.django_db
def test_a_key_whose_job_in_line_was_cancelled_gets_its_turn_from_the_maintenance_chore():
    head, follower = (enqueue_job("probe.run", concurrency_key="k") for _ in range(2))
    cancel_job(head.id)
    assert Job.objects.get(id=follower.id).parked
    assert execution.release_stalled_keys(["default"]) == 1
    assert not Job.objects.get(id=follower.id).parked
    assert _outbox_actions(follower.id) == ["enqueue"]
    # Its key has a job in line again: nothing more to release.
    assert execution.release_stalled_keys(["default"]) == 0


@pytest.mark.django_db
def test_an_expired_job_in_line_gives_its_key_the_next_turn():
    head = enqueue_job("probe.run", concurrency_key="k", expires_in=60)
    follower = enqueue_job("probe.run", concurrency_key="k")
    _expire_now(head.id)
    assert execution.claim([str(head.id)], worker_id="w").jobs == []
    assert Job.objects.get(id=head.id).status == "expired"
    assert not Job.objects.get(id=follower.id).parked


@pytest.mark.django_db
def test_the_reconciler_leaves_parked_jobs_out_of_redis(redis_client):
    from queue_app.runtime.reconciler import Reconciler
    from tests.helpers import ready_ids

    head, follower = (enqueue_job("probe.run", concurrency_key="k") for _ in range(2))
    Reconciler(grace_seconds=0).run_once()
    assert str(follower.id) not in ready_ids(redis_client)
    assert Job.objects.get(id=follower.id).parked


@pytest.mark.django_db
def test_full_key_buckets_are_pruned_and_spent_ones_kept():
    from queue_app.engine.controls import prune_full_key_buckets

    set_queue_limits("default", key_rate_limit=0.001)
    spent, refilled = (str(enqueue_job("probe.run", concurrency_key=key).id) for key in ("spent", "refilled"))
    execution.claim([spent, refilled], worker_id="w", queues={"default": True})
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_job_key_buckets SET updated_at = now() - interval '2000 seconds'"
            " WHERE key = 'refilled'"
        )
    assert prune_full_key_buckets(["default"]) == 1
    assert list(KeyBucket.objects.values_list("key", flat=True)) == ["spent"]


@pytest.mark.django_db
def test_a_dependency_expired_at_the_claim_decides_its_dependents_in_that_transaction():
    """An expired dependency settles without completing, as a cancelled one does: a dependent
    under the default policy is cancelled naming it, one with on_failure="continue" is
    released; neither waits for ever (found by the chaos run's no_step_left_waiting)."""
    parent = enqueue_job("probe.run", expires_in=60)
    cancelled = enqueue_job("probe.run", depends_on=[parent])
    continued = enqueue_job("probe.run", depends_on=[parent], on_failure="continue")
    _expire_now(parent.id)
    assert execution.claim([str(parent.id)], worker_id="w").jobs == []
    statuses = dict(
        Job.objects.filter(id__in=[parent.id, cancelled.id, continued.id]).values_list("id", "status")
    )
    assert statuses == {parent.id: "expired", cancelled.id: "cancelled", continued.id: "queued"}
    reason = JobLog.objects.get(job_id=cancelled.id, event="dependency_failed")
    assert str(parent.id) in reason.message + str(reason.extra)


@pytest.mark.django_db
def test_a_dependency_expired_by_the_sweep_decides_its_dependents_in_that_transaction():
    parent = enqueue_job("probe.run", expires_in=60)
    dependent = enqueue_job("probe.run", depends_on=[parent], on_failure="continue")
    _expire_now(parent.id)
    assert [job.id for job in execution.expire_queued_jobs()] == [str(parent.id)]
    assert Job.objects.get(id=dependent.id).status == "queued"
    assert JobLog.objects.filter(job_id=dependent.id, event="released").count() == 1
