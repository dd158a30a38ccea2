"""A workflow step with a concurrency key takes its key's turn when its dependencies release
it, as an enqueued job does (workflows_v2.sql, claim_v5.sql): one id per key in line, the
key's other ready jobs parked (no outbox row) until the claim of the one in line gives the
next its turn. Each test asserts the jobs' parked flags and outbox rows together."""

from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.engine import execution
from queue_app.engine.controls import KEY_LOCK_CLASS
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs, retry_job
from tests.helpers import claim_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def outbox_actions(job) -> list[str]:
    return list(OutboxMessage.objects.filter(job_id=job.id).order_by("id").values_list("action", flat=True))


def state(job) -> tuple[str, bool]:
    found = Job.objects.get(id=job.id)
    return found.status, found.parked


def complete(job) -> None:
    (claimed,) = claim_jobs([str(job.id)], worker_id="w")
    assert execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])


def expire_now(job) -> None:
    """Move a job's expiry into the past (the database clock decides, as in the claim)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_jobs SET expires_at = now() - interval '1 second' WHERE id = %s", [str(job.id)]
        )


def claim_ids(*jobs) -> list[str]:
    return [claimed.id for claimed in execution.claim([str(job.id) for job in jobs], worker_id="w").jobs]


def test_a_step_released_while_its_key_has_a_job_in_line_parks_until_that_job_is_claimed():
    in_line = enqueue_job("wf.add", concurrency_key="k")
    parent = enqueue_job("wf.add")
    step = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k")
    assert state(step) == ("waiting", False) and outbox_actions(step) == []

    complete(parent)

    assert state(step) == ("queued", True)
    assert outbox_actions(step) == []  # never sent to Redis while it is parked
    released = JobLog.objects.get(job_id=step.id, event="released")
    assert released.extra == {"parked": True}
    before = Job.objects.get(id=step.id).enqueued_at

    # The claim of the key's job in line gives the step its turn, in the claim's transaction.
    assert claim_ids(in_line) == [str(in_line.id)]
    assert state(step) == ("queued", False)
    assert outbox_actions(step) == ["enqueue"]
    assert Job.objects.get(id=step.id).enqueued_at > before


def test_a_step_released_while_its_key_has_none_in_line_goes_in_line():
    parent = enqueue_job("wf.add", concurrency_key="k")
    step = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k")
    # The parent was the key's job in line; claimed, it leaves the line to the step.
    complete(parent)
    assert state(step) == ("queued", False)
    assert outbox_actions(step) == ["enqueue"]
    assert JobLog.objects.get(job_id=step.id, event="released").extra == {}


def test_two_steps_of_one_key_released_by_one_settle_put_one_in_line_and_park_the_other():
    """The first in line is the key's first by priority, as the claim picks a key's next job."""
    parent = enqueue_job("wf.add")
    low = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k", priority="low")
    high = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k", priority="high")
    other_key = enqueue_job("wf.add", depends_on=[parent], concurrency_key="other")

    complete(parent)

    assert state(high) == ("queued", False) and outbox_actions(high) == ["enqueue"]
    assert state(low) == ("queued", True) and outbox_actions(low) == []
    assert state(other_key) == ("queued", False) and outbox_actions(other_key) == ["enqueue"]
    assert claim_ids(high) == [str(high.id)]
    assert state(low) == ("queued", False) and outbox_actions(low) == ["enqueue"]


def test_a_step_released_with_its_start_time_ahead_does_not_park():
    """As an enqueued job scheduled for later: it joins the line when it comes due."""
    enqueue_job("wf.add", concurrency_key="k")
    parent = enqueue_job("wf.add")
    later = enqueue_job(
        "wf.add", depends_on=[parent], concurrency_key="k", run_at=timezone.now() + timedelta(hours=1)
    )
    complete(parent)
    assert state(later) == ("queued", False)
    assert outbox_actions(later) == ["schedule"]


def test_a_waiting_step_neither_parks_at_its_enqueue_nor_parks_its_keys_next_job():
    """Until it is released it is not in line: a job of its key enqueued in the same call
    goes in line."""
    parent = enqueue_job("wf.add")
    step, follower = enqueue_jobs(
        [
            JobRequest("wf.add", depends_on=[parent], concurrency_key="k"),
            JobRequest("wf.add", concurrency_key="k"),
        ]
    )
    assert state(step) == ("waiting", False) and state(follower) == ("queued", False)
    assert outbox_actions(follower) == ["enqueue"]
    complete(parent)
    # Released behind the follower, which is in line.
    assert state(step) == ("queued", True) and outbox_actions(step) == []


def test_a_step_enqueued_after_its_dependency_completed_parks_at_once_and_says_so():
    """Its enqueue decides it at once (every dependency settled), through the same settle."""
    parent = enqueue_job("wf.add")
    complete(parent)
    in_line = enqueue_job("wf.add", concurrency_key="k")
    step = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k")
    assert (step.status, step.parked) == ("queued", True)
    assert state(step) == ("queued", True) and outbox_actions(step) == []
    assert claim_ids(in_line) == [str(in_line.id)]
    assert state(step) == ("queued", False)


def test_a_dependency_expired_at_the_claim_parks_its_released_step_behind_its_keys_job_in_line():
    """The expiry path (claim_v5.sql) releases through the same settle."""
    in_line = enqueue_job("wf.add", concurrency_key="k")
    parent = enqueue_job("wf.add", expires_in=60)
    step = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k", on_failure="continue")
    expire_now(parent)
    assert claim_ids(parent) == []
    assert Job.objects.get(id=parent.id).status == "expired"
    assert state(step) == ("queued", True) and outbox_actions(step) == []
    assert claim_ids(in_line) == [str(in_line.id)]
    assert state(step) == ("queued", False) and outbox_actions(step) == ["enqueue"]


def test_an_expiry_and_the_claim_of_the_keys_job_in_line_in_one_claim_give_the_step_its_turn():
    in_line = enqueue_job("wf.add", concurrency_key="k")
    parent = enqueue_job("wf.add", expires_in=60)
    step = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k", on_failure="continue")
    expire_now(parent)
    assert claim_ids(parent, in_line) == [str(in_line.id)]
    # Released parked behind the job in line, then given its turn by that job's claim.
    assert state(step) == ("queued", False) and outbox_actions(step) == ["enqueue"]


def test_a_step_resumed_by_a_retry_and_released_again_takes_its_turn():
    """A retried dependency sends the steps its failure cancelled back to waiting
    (queue_resume_dependents_v2); released again, a keyed one parks as any release does."""
    parent = enqueue_job("wf.add")
    step = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k")
    (claimed,) = claim_jobs([str(parent.id)], worker_id="w")
    execution.fail_job(claimed.id, claimed.fence, "RuntimeError: boom", retry=False)
    assert state(step)[0] == "cancelled"
    retry_job(parent.id)
    assert state(step)[0] == "waiting"
    in_line = enqueue_job("wf.add", concurrency_key="k")
    complete(parent)
    assert state(step) == ("queued", True) and outbox_actions(step) == []
    assert claim_ids(in_line) == [str(in_line.id)]
    assert state(step) == ("queued", False)


def _key_lock_held_elsewhere(queue: str, key: str) -> psycopg.Connection:
    """A second connection holding the key's advisory lock, as an enqueue to it in progress does."""
    settings = connection.settings_dict
    other = psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    )
    other.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", [KEY_LOCK_CLASS, f"{queue}/{key}"])
    return other


def test_a_step_whose_key_is_locked_by_another_transaction_parks_and_the_chore_gives_its_turn():
    """The settle only tries the key's lock (it runs in completions' and claims' transactions,
    which never wait for an enqueuing one); a key it could not lock parks its step, and the
    maintenance leader's chore gives the key its turn, as it has no id in line."""
    parent = enqueue_job("wf.add")
    step = enqueue_job("wf.add", depends_on=[parent], concurrency_key="k")
    other = _key_lock_held_elsewhere("default", "k")
    try:
        complete(parent)
        assert state(step) == ("queued", True) and outbox_actions(step) == []
    finally:
        other.close()
    assert execution.release_stalled_keys(["default"]) == 1
    assert state(step) == ("queued", False) and outbox_actions(step) == ["enqueue"]
