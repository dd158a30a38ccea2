"""Transactional enqueue: the job, its first log row and its outbox row commit together."""

import threading
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from queue_app import broker
from queue_app.exceptions import (
    IdempotencyConflict,
    InvalidJob,
    JobsRejected,
    UnknownJobType,
)
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import relay_all
from tests.pipeline.test_enqueue_statement import _other_connection

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def test_enqueue_writes_job_log_and_outbox_together():
    job = enqueue_job("demo.echo", {"x": 1}, priority="high")
    assert job.was_created
    stored = Job.objects.get(id=job.id)
    assert (stored.status, stored.priority, stored.attempts, stored.max_attempts) == ("queued", "high", 0, 3)
    assert list(JobLog.objects.filter(job=job).values_list("event", flat=True)) == ["enqueued"]
    outbox = OutboxMessage.objects.get(job=job)
    assert outbox.action == "enqueue" and outbox.dispatched_at is None
    # high stands for 10: the score is -10; the member is the µs since 2020-01-01, then the id.
    assert stored.priority_value == 10
    micros = (stored.enqueued_at - datetime(2020, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert (outbox.score, outbox.member) == (-10, f"{micros:016d}:{job.id}")


@pytest.mark.parametrize(
    ("priority", "tier", "value"),
    [("high", "high", 10), ("medium", "medium", 0), ("low", "low", -10), (50, "high", 50), (0, "medium", 0)]
    + [(-100, "low", -100), (100, "high", 100), (1, "high", 1), (-1, "low", -1)],
)
def test_a_priority_by_name_or_integer_is_stored_as_its_tier_and_value(priority, tier, value):
    job = enqueue_job("demo.echo", priority=priority)
    stored = Job.objects.get(id=job.id)
    assert (job.priority, job.priority_value) == (stored.priority, stored.priority_value) == (tier, value)
    assert OutboxMessage.objects.get(job=job).score == -value


def test_a_bad_priority_names_the_field_and_its_rule():
    with pytest.raises(InvalidJob) as error:
        enqueue_job("demo.echo", priority=101)
    assert error.value.field == "priority"
    assert error.value.message == "must be one of high, medium, low, or an integer from -100 to 100"


def test_caller_rollback_leaves_no_job_no_outbox_and_nothing_in_redis(redis_client):
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        enqueue_job("demo.echo", {"n": 1})
        raise Abort
    assert not Job.objects.exists()
    assert not OutboxMessage.objects.exists()
    assert relay_all() == 0
    assert redis_client.dbsize() == 0


def test_scheduled_job_goes_to_the_retry_set_and_is_not_claimable_yet(redis_client):
    run_at = timezone.now() + timedelta(hours=1)
    job = enqueue_job("demo.echo", run_at=run_at)
    relay_all()
    assert redis_client.zscore(broker.retry_key("default"), str(job.id)) == pytest.approx(run_at.timestamp())
    assert redis_client.zcard(broker.priority_key("default")) == 0


def test_repeated_idempotency_key_returns_the_existing_job():
    first = enqueue_job("demo.echo", {"a": 1}, idempotency_key="k-1")
    second = enqueue_job("demo.echo", {"a": 1}, idempotency_key="k-1")
    assert second.id == first.id and not second.was_created
    assert Job.objects.count() == 1 and OutboxMessage.objects.count() == 1


def test_same_key_with_a_different_request_is_a_conflict():
    enqueue_job("demo.echo", {"a": 1}, idempotency_key="k-2")
    with pytest.raises(IdempotencyConflict):
        enqueue_job("demo.echo", {"a": 2}, idempotency_key="k-2")
    assert Job.objects.count() == 1


@pytest.mark.parametrize(("first", "again"), [("medium", 0), (0, "medium"), ("high", 10), (-10, "low")])
def test_a_priority_by_name_or_by_its_value_is_the_same_request(first, again):
    job = enqueue_job("demo.echo", {"a": 1}, priority=first, idempotency_key="k-p")
    repeat = enqueue_job("demo.echo", {"a": 1}, priority=again, idempotency_key="k-p")
    assert repeat.id == job.id and not repeat.was_created
    with pytest.raises(IdempotencyConflict):
        enqueue_job("demo.echo", {"a": 1}, priority=11, idempotency_key="k-p")


def test_a_key_stored_when_the_priority_was_hashed_as_given_still_matches():
    """Keys stored before the priority was resolved hashed a tier's name as given: the same
    request, by name or by value, still finds their job."""
    job = enqueue_job("demo.echo", {"a": 1}, idempotency_key="k-old")
    as_given = JobRequest(
        type="demo.echo", payload={"a": 1}, priority="medium", max_attempts=job.max_attempts
    )
    Job.objects.filter(id=job.id).update(idempotency_fingerprint=as_given.fingerprint())
    for priority in ("medium", 0):
        repeat = enqueue_job("demo.echo", {"a": 1}, priority=priority, idempotency_key="k-old")
        assert repeat.id == job.id and not repeat.was_created
    with pytest.raises(IdempotencyConflict):
        enqueue_job("demo.echo", {"a": 1}, priority="high", idempotency_key="k-old")


def test_keys_are_per_owner_and_jobs_without_one_share_a_scope(django_user_model):
    """As the IETF draft "The Idempotency-Key HTTP Header Field" scopes keys per client."""
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    alices = enqueue_job("demo.echo", idempotency_key="shared", owner=alice)
    bobs = enqueue_job("demo.echo", idempotency_key="shared", owner=bob)
    ownerless = enqueue_job("demo.echo", idempotency_key="shared")
    assert bobs.was_created and ownerless.was_created
    assert len({alices.id, bobs.id, ownerless.id}) == 3
    assert enqueue_job("demo.echo", idempotency_key="shared", owner=bob).id == bobs.id
    assert enqueue_job("demo.echo", idempotency_key="shared").id == ownerless.id
    with pytest.raises(IdempotencyConflict):
        enqueue_job("demo.echo", {"other": 1}, idempotency_key="shared", owner=bob)
    with pytest.raises(IdempotencyConflict):
        enqueue_job("demo.echo", {"other": 1}, idempotency_key="shared")
    assert Job.objects.count() == 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("others", [0, 2])
def test_a_key_whose_job_was_deleted_before_the_look_up_is_free_again(monkeypatch, others):
    """The insert met the key's job, which another connection pruned before the look-up:
    the call runs again and takes the key, instead of failing (alone, and with other jobs
    in its call, whose first inserts are undone)."""
    from queue_app.engine import enqueue as enqueue_module

    old = enqueue_job("demo.echo", idempotency_key="pruned")
    look_up = enqueue_module._existing_jobs

    def pruned_in_between(keys, owner):
        with _other_connection() as other:
            for table, column in (
                ("queue_app_job_logs", "job_id"),
                ("queue_app_job_outbox", "job_id"),
                ("queue_app_jobs", "id"),
            ):
                other.execute(f"DELETE FROM {table} WHERE {column} = %s", [old.id])
        monkeypatch.setattr(enqueue_module, "_existing_jobs", look_up)
        return look_up(keys, owner)

    monkeypatch.setattr(enqueue_module, "_existing_jobs", pruned_in_between)
    requests = [JobRequest(type="demo.echo", idempotency_key="pruned")]
    requests += [JobRequest(type="demo.echo", payload={"n": n}) for n in range(others)]
    jobs = enqueue_jobs(requests)
    assert all(job.was_created for job in jobs) and old.id not in {job.id for job in jobs}
    assert set(Job.objects.values_list("id", flat=True)) == {job.id for job in jobs}
    assert OutboxMessage.objects.count() == JobLog.objects.count() == 1 + others


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"type": "os.system"}, "type"),
        ({"priority": "urgent"}, "priority"),
        ({"queue": "nope"}, "queue"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 101}, "max_attempts"),
        ({"payload": {"s": "nul\x00"}}, "payload"),
        ({"payload": {"s": "\ud800"}}, "payload"),
        ({"payload": {"n": 2**70}}, "payload"),
        ({"idempotency_key": "x" * 256}, "idempotency_key"),
        ({"run_at": datetime(2305, 6, 5, 23, 47, 34, 740992, tzinfo=UTC)}, "run_at"),  # LAST + 1 µs
        ({"run_at": datetime(2400, 1, 1, tzinfo=UTC)}, "run_at"),
        ({"priority": "urgent"}, "priority"),
        ({"priority": 101}, "priority"),
        ({"priority": -101}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": 1.5}, "priority"),
        # Wrong types are refused by field too, not left to raise TypeError or AttributeError.
        ({"queue": ["default"]}, "queue"),
        ({"queue": {"default": 1}}, "queue"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "run_at"),
        ({"run_at": date(2030, 1, 1)}, "run_at"),
        ({"run_at": 1700000000}, "run_at"),
    ],
)
def test_invalid_requests_name_the_field_and_write_nothing(kwargs, field):
    args = {"type": "demo.echo", "payload": {}, **kwargs}
    with pytest.raises((InvalidJob, UnknownJobType)) as error:
        enqueue_job(args.pop("type"), args.pop("payload"), **args)
    assert error.value.field == field
    assert not Job.objects.exists() and not OutboxMessage.objects.exists()


# 2020-01-01 + (2**53 - 1) µs: the last enqueue time ordered exactly.
LAST = datetime(2305, 6, 5, 23, 47, 34, 740991, tzinfo=UTC)


def test_run_at_may_be_the_last_exactly_scored_instant():
    job = enqueue_job("demo.echo", run_at=LAST, priority="low")
    assert Job.objects.get(id=job.id).enqueued_at == LAST
    # Once due, its member has the largest time: 2**53 - 1 µs, 16 digits, exact as a float64.
    assert broker.ready_member(job.id, LAST) == f"9007199254740991:{job.id}"
    assert broker.enqueue_order_score(LAST) == 2**53 - 1


def test_a_run_at_beyond_the_score_range_is_refused_with_its_limit():
    with pytest.raises(InvalidJob) as error:
        enqueue_job("demo.echo", run_at=LAST + timedelta(microseconds=1))
    assert error.value.field == "run_at"
    assert "2305-06-05T23:47:34.740991+00:00" in error.value.message


def test_deeply_nested_payload_is_rejected_without_recursion_error():
    payload = current = {}
    for _ in range(5000):
        current["a"] = {}
        current = current["a"]
    with pytest.raises(InvalidJob) as error:
        enqueue_job("demo.echo", payload)
    assert error.value.field == "payload"


def test_bulk_is_all_or_nothing():
    good = JobRequest(type="demo.echo", payload={"i": 1})
    bad = JobRequest(type="demo.echo", priority="nope")
    with pytest.raises(JobsRejected) as rejected:
        enqueue_jobs([good, bad])
    assert [(e.index, e.code, e.field) for e in rejected.value.errors] == [(1, "invalid", "priority")]
    assert not Job.objects.exists()
    jobs = enqueue_jobs([good, JobRequest(type="demo.sleep", payload={"seconds": 0})])
    assert len(jobs) == 2 and Job.objects.count() == 2
    assert OutboxMessage.objects.count() == 2 and JobLog.objects.count() == 2


def test_a_bulk_names_each_badly_typed_job_by_index():
    """A wrong type in one job is that job's error, not an exception that hides the others."""
    with pytest.raises(JobsRejected) as rejected:
        enqueue_jobs(
            [
                JobRequest(type="demo.echo", queue=["default"]),
                JobRequest(type="demo.echo"),
                {"type": "demo.echo"},
                JobRequest(type="demo.echo", run_at="2030-01-01"),
            ]
        )
    assert [(e.index, e.code, e.field) for e in rejected.value.errors] == [
        (0, "invalid", "queue"),
        (2, "invalid", None),
        (3, "invalid", "run_at"),
    ]
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_create_exactly_one_job():
    barrier = threading.Barrier(8)
    results, errors = [], []

    def submit():
        try:
            barrier.wait()
            results.append(enqueue_job("demo.echo", {"same": True}, idempotency_key="race").id)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(results)) == 1 and len(results) == 8
    assert Job.objects.count() == 1 and OutboxMessage.objects.count() == 1


def test_a_rejection_names_every_job_at_fault_with_its_index_and_field(django_user_model):
    """Rules first (nothing is written); then keys already used, found in the same call."""
    bob = django_user_model.objects.create_user("bob")
    enqueue_job("demo.echo", {"n": 1}, idempotency_key="mine")
    enqueue_job("demo.echo", {"n": 1}, idempotency_key="mine-too")
    enqueue_job("demo.echo", idempotency_key="bobs", owner=bob)
    before = (Job.objects.count(), JobLog.objects.count(), OutboxMessage.objects.count())

    with pytest.raises(JobsRejected) as broken:
        enqueue_jobs(
            [
                JobRequest(type="os.system"),
                JobRequest(type="demo.echo", idempotency_key="k"),
                JobRequest(type="demo.echo", queue="nope"),
                JobRequest(type="demo.echo", idempotency_key="k"),
            ]
        )
    with pytest.raises(JobsRejected) as reused:
        enqueue_jobs(
            [
                JobRequest(type="demo.echo", idempotency_key="fresh"),
                JobRequest(type="demo.echo", payload={"n": 2}, idempotency_key="mine"),
                # Bob's key is not this caller's (no owner): free, but undone with the rest.
                JobRequest(type="demo.echo", idempotency_key="bobs"),
                JobRequest(type="demo.echo", payload={"n": 2}, idempotency_key="mine-too"),
            ]
        )

    assert [(e.index, e.code, e.field) for e in broken.value.errors] == [
        (0, "unknown_type", "type"),
        (2, "invalid", "queue"),
        (3, "invalid", "idempotency_key"),
    ]
    assert [(e.index, e.code, e.field) for e in reused.value.errors] == [
        (1, "idempotency_key_reused", "idempotency_key"),
        (3, "idempotency_key_reused", "idempotency_key"),
    ]
    # The job with a fresh key, saved before the others failed, rolled back with them.
    assert (Job.objects.count(), JobLog.objects.count(), OutboxMessage.objects.count()) == before
