"""Unique jobs: one job per owner and unique key in the chosen statuses, within a period.

The reference is Oban's ``unique: [period, keys, states]`` (a duplicate returns the
existing job, the incoming job's period and states decide) and BullMQ's deduplication.
"""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from queue_app.exceptions import IdempotencyConflict, InvalidJob, JobsRejected
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from queue_app.states import DEFAULT_UNIQUE_STATES, TERMINAL, Status
from queue_app.testing import run_jobs
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def _rows() -> tuple[int, int, int]:
    return Job.objects.count(), JobLog.objects.count(), OutboxMessage.objects.count()


def test_a_held_key_returns_the_job_holding_it():
    first = enqueue_job("demo.echo", {"n": 1}, unique_key="report")
    again = enqueue_job("demo.echo", {"n": 2}, unique_key="report")

    assert (first.was_created, first.was_duplicate) == (True, False)
    assert (again.was_created, again.was_duplicate) == (False, True)
    assert again.id == first.id and again.payload == {"n": 1} and again.unique_key == "report"
    assert _rows() == (1, 1, 1)
    assert Job.objects.get().unique_key == "report"


def test_other_keys_and_jobs_without_a_key_are_not_held():
    a = enqueue_job("demo.echo", unique_key="a")
    b = enqueue_job("demo.echo", unique_key="b")
    plain = [enqueue_job("demo.echo") for _ in range(2)]
    assert all(job.was_created for job in (a, b, *plain))
    assert _rows() == (4, 4, 4)


def test_keys_are_per_owner_and_jobs_without_one_share_a_scope(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    alices = enqueue_job("demo.echo", unique_key="k", owner=alice)
    bobs = enqueue_job("demo.echo", unique_key="k", owner=bob)
    ownerless = enqueue_job("demo.echo", unique_key="k")

    assert len({alices.id, bobs.id, ownerless.id}) == 3
    assert enqueue_job("demo.echo", unique_key="k", owner=bob).id == bobs.id
    assert enqueue_job("demo.echo", unique_key="k").id == ownerless.id
    assert Job.objects.count() == 3


def test_a_scheduled_job_holds_its_key():
    scheduled = enqueue_job("demo.echo", unique_key="tomorrow", run_at=timezone.now() + timedelta(days=1))
    again = enqueue_job("demo.echo", unique_key="tomorrow")
    assert again.id == scheduled.id and again.was_duplicate


def test_the_default_statuses_are_those_of_a_job_yet_to_finish():
    """Queued and processing, and any status added that is not terminal (a running job
    whose cancel is not yet confirmed still runs: its key must stay held), except waiting: the
    defaults are part of stored idempotency fingerprints, which must keep matching."""
    assert {"queued", "processing"} <= DEFAULT_UNIQUE_STATES
    assert DEFAULT_UNIQUE_STATES == set(Status) - TERMINAL - {Status.WAITING}
    assert not DEFAULT_UNIQUE_STATES & {"completed", "failed", "cancelled"}


@pytest.mark.parametrize("status", ["processing", "queued"])
def test_a_job_in_a_default_status_holds_its_key(status):
    job = enqueue_job("demo.echo", unique_key="k")
    Job.objects.filter(id=job.id).update(status=status)
    assert enqueue_job("demo.echo", unique_key="k").id == job.id


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_finished_job_frees_its_key_by_default(status):
    job = enqueue_job("demo.echo", unique_key="k")
    Job.objects.filter(id=job.id).update(status=status)
    again = enqueue_job("demo.echo", unique_key="k")
    assert again.was_created and again.id != job.id


def test_the_requests_own_statuses_decide():
    """As Oban: the incoming job's states, not those of the job already there."""
    job = enqueue_job("demo.echo", unique_key="k", unique_states=["queued"])
    Job.objects.filter(id=job.id).update(status="failed")
    assert enqueue_job("demo.echo", unique_key="k").was_created
    assert enqueue_job("demo.echo", unique_key="k", unique_states=["failed"]).id == job.id


def _created_ago(job, seconds: float) -> None:
    Job.objects.filter(id=job.id).update(created_at=Now() - timedelta(seconds=seconds))


def test_only_a_job_created_within_the_period_holds_its_key():
    """Seeded just inside and just outside the period (Oban compares inserted_at)."""
    job = enqueue_job("demo.echo", unique_key="k", unique_for=60)
    _created_ago(job, 59)
    assert enqueue_job("demo.echo", unique_key="k", unique_for=60).id == job.id
    _created_ago(job, 61)
    newer = enqueue_job("demo.echo", unique_key="k", unique_for=60)
    assert newer.was_created and newer.id != job.id
    # Without a period, the old job (still queued) would have held it: the newest is returned.
    assert enqueue_job("demo.echo", unique_key="k").id == newer.id


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"unique_key": ""}, "unique_key"),
        ({"unique_key": "x" * 256}, "unique_key"),
        ({"unique_key": "nul\x00"}, "unique_key"),
        ({"unique_key": 7}, "unique_key"),
        ({"unique_for": 60}, "unique_for"),
        ({"unique_states": ["queued"]}, "unique_states"),
        ({"unique_key": "k", "unique_for": 0}, "unique_for"),
        ({"unique_key": "k", "unique_for": -1}, "unique_for"),
        ({"unique_key": "k", "unique_for": float("nan")}, "unique_for"),
        ({"unique_key": "k", "unique_for": float("inf")}, "unique_for"),
        ({"unique_key": "k", "unique_for": 10**400}, "unique_for"),
        ({"unique_key": "k", "unique_for": True}, "unique_for"),
        ({"unique_key": "k", "unique_for": "60"}, "unique_for"),
        ({"unique_key": "k", "unique_states": "queued"}, "unique_states"),
        ({"unique_key": "k", "unique_states": []}, "unique_states"),
        ({"unique_key": "k", "unique_states": ["queued", "paused"]}, "unique_states"),
        ({"unique_key": "k", "unique_states": [["queued"]]}, "unique_states"),
    ],
)
def test_bad_unique_options_name_their_field_and_write_nothing(options, field):
    with pytest.raises(InvalidJob) as error:
        enqueue_job("demo.echo", **options)
    assert error.value.field == field
    assert _rows() == (0, 0, 0)


def test_the_unique_options_are_part_of_the_idempotency_fingerprint():
    job = enqueue_job("demo.echo", idempotency_key="i", unique_key="u")
    assert enqueue_job("demo.echo", idempotency_key="i", unique_key="u").id == job.id
    for other in ({"unique_key": "v"}, {"unique_key": "u", "unique_for": 5}, {}):
        with pytest.raises(IdempotencyConflict):
            enqueue_job("demo.echo", idempotency_key="i", **other)
    # The defaults as resolved: naming them is the same request.
    same = enqueue_job(
        "demo.echo", idempotency_key="i", unique_key="u", unique_states=("processing", "queued", "cancelling")
    )
    assert same.id == job.id


# --- bulk ---------------------------------------------------------------------------------


def test_a_bulk_creates_one_job_per_key_and_returns_it_for_the_repeats():
    jobs = enqueue_jobs(
        [
            JobRequest(type="demo.echo", payload={"i": 0}, unique_key="a"),
            JobRequest(type="demo.echo", payload={"i": 1}, unique_key="a"),
            JobRequest(type="demo.echo", payload={"i": 2}, unique_key="b"),
            JobRequest(type="demo.echo", payload={"i": 3}),
            JobRequest(type="demo.echo", payload={"i": 4}, unique_key="b"),
        ]
    )
    assert [job.was_created for job in jobs] == [True, False, True, True, False]
    assert [job.was_duplicate for job in jobs] == [False, True, False, False, True]
    assert (jobs[1].id, jobs[4].id) == (jobs[0].id, jobs[2].id)
    assert [job.payload["i"] for job in jobs] == [0, 0, 2, 3, 2]
    assert _rows() == (3, 3, 3)


def test_a_bulk_returns_the_jobs_already_holding_its_keys():
    held = enqueue_job("demo.echo", unique_key="a")
    jobs = enqueue_jobs([JobRequest(type="demo.echo", unique_key=key) for key in ("c", "a", "c")])
    assert [job.was_created for job in jobs] == [True, False, False]
    assert jobs[1].id == held.id and jobs[2].id == jobs[0].id
    again = enqueue_jobs([JobRequest(type="demo.echo", unique_key=key) for key in ("a", "c")])
    assert [job.id for job in again] == [held.id, jobs[0].id] and not any(job.was_created for job in again)
    assert _rows() == (2, 2, 2)


def test_a_later_request_of_a_bulk_not_held_by_queued_jobs_gets_its_own_job():
    """A job just created is queued: it holds its key only for requests whose statuses include it."""
    jobs = enqueue_jobs([JobRequest(type="demo.echo", unique_key="k", unique_states=["completed"])] * 2)
    assert all(job.was_created for job in jobs) and jobs[0].id != jobs[1].id


def test_a_rejected_bulk_writes_none_of_its_unique_jobs():
    enqueue_job("demo.echo", {"n": 1}, idempotency_key="used")
    before = _rows()
    with pytest.raises(JobsRejected) as rejected:
        enqueue_jobs(
            [
                JobRequest(type="demo.echo", unique_key="fresh"),
                JobRequest(type="demo.echo", payload={"n": 2}, idempotency_key="used"),
            ]
        )
    assert [(e.index, e.code) for e in rejected.value.errors] == [(1, "idempotency_key_reused")]
    assert _rows() == before
    assert enqueue_job("demo.echo", unique_key="fresh").was_created


# --- the key is freed once the job has run ---------------------------------------------------


def test_a_key_is_free_again_once_its_job_completed():
    job = enqueue_job("demo.echo", {"n": 1}, unique_key="k")
    assert run_jobs().completed == 1
    assert Job.objects.get(id=job.id).status == "completed"

    again = enqueue_job("demo.echo", {"n": 2}, unique_key="k")
    assert again.was_created and again.id != job.id


def test_with_completed_in_the_statuses_a_key_is_held_for_the_whole_period():
    """Oban's "at most once per period": unique: [period: 60, states: [..., :completed]]."""
    options = {"unique_key": "k", "unique_for": 3600, "unique_states": ["queued", "processing", "completed"]}
    job = enqueue_job("demo.echo", {"n": 1}, **options)
    assert run_jobs().completed == 1
    assert Job.objects.get(id=job.id).status == "completed"

    within = enqueue_job("demo.echo", {"n": 2}, **options)
    assert within.id == job.id and within.was_duplicate and within.status == "completed"
    _created_ago(job, 3601)
    after = enqueue_job("demo.echo", {"n": 3}, **options)
    assert after.was_created and Job.objects.count() == 2


# --- transactions and locks -----------------------------------------------------------------


def _waiting_on_an_advisory_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("commits", [True, False])
def test_a_key_is_locked_until_the_enqueuing_transaction_ends(commits):
    """A second enqueue of the key waits for the first's transaction: then it finds the
    job that committed, or, after a rollback, takes the key itself."""
    enqueued, finish = threading.Event(), threading.Event()
    first: list[Job] = []
    second: list[Job] = []

    class RolledBack(Exception):
        pass

    def hold():
        try:
            with transaction.atomic():
                first.append(enqueue_job("demo.echo", {"by": "first"}, unique_key="k"))
                enqueued.set()
                finish.wait(30)
                if not commits:
                    raise RolledBack
        except RolledBack:
            pass
        finally:
            connection.close()

    def follow():
        try:
            second.append(enqueue_job("demo.echo", {"by": "second"}, unique_key="k"))
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert enqueued.wait(30)
    follower = threading.Thread(target=follow)
    follower.start()
    wait_until(_waiting_on_an_advisory_lock, message="the second enqueue waiting on the key's lock")
    assert not second
    finish.set()
    holder.join(30)
    follower.join(30)

    if commits:
        assert second[0].id == first[0].id and second[0].was_duplicate
        assert list(Job.objects.values_list("payload", flat=True)) == [{"by": "first"}]
    else:
        assert second[0].was_created
        assert list(Job.objects.values_list("payload", flat=True)) == [{"by": "second"}]


@pytest.mark.django_db(transaction=True)
def test_a_repeatable_read_transaction_is_refused():
    """Its snapshot predates the lock, so it could miss the lock's previous holder's job."""
    with pytest.raises(InvalidJob) as error, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        enqueue_job("demo.echo", unique_key="k")
    assert error.value.field == "unique_key" and "READ COMMITTED" in error.value.message
    assert not Job.objects.exists()
