"""Dependencies, the waiting status and the release in the settle's transaction, against
PostgreSQL: each test asserts the jobs, their log rows and their outbox rows together."""

import pytest
from django.db import connection, transaction

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.engine import execution
from queue_app.exceptions import InvalidWorkflow, JobsRejected
from queue_app.models import Job, JobDependency, JobLog, JobWait, OutboxMessage
from queue_app.services import JobRequest, cancel_job, enqueue_job, enqueue_jobs, retry_job
from queue_app.states import TRANSITION_TABLE, Status
from queue_app.testing import run_jobs
from tests.helpers import claim_jobs

pytestmark = pytest.mark.django_db


def events(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))


def status(job) -> str:
    return Job.objects.get(id=job.id).status


def outbox_actions(job) -> list[str]:
    return list(OutboxMessage.objects.filter(job_id=job.id).order_by("id").values_list("action", flat=True))


def claim_and_complete(job, result=None):
    (claimed,) = claim_jobs([str(job.id)], worker_id="w")
    assert execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, result)])


def claim_and_fail(job):
    (claimed,) = claim_jobs([str(job.id)], worker_id="w")
    execution.fail_job(claimed.id, claimed.fence, "RuntimeError: boom", retry=False)


def test_a_dependent_waits_outside_redis_and_the_completion_releases_it_in_its_commit():
    parent = enqueue_job("wf.add", {"value": 1})
    child = enqueue_job("wf.add", {"value": 2}, depends_on=[parent])
    assert child.status == Status.WAITING
    assert status(child) == Status.WAITING
    assert outbox_actions(child) == []  # never in Redis while it waits
    assert JobDependency.objects.filter(job_id=child.id, depends_on_id=parent.id).exists()

    claim_and_complete(parent, 1)

    assert status(child) == Status.QUEUED
    assert events(child) == ["enqueued", "released"]
    (row,) = OutboxMessage.objects.filter(job_id=child.id)
    assert row.action == "enqueue"
    job = Job.objects.get(id=child.id)
    from queue_app import broker

    assert row.member == broker.ready_member(job.id, job.enqueued_at)
    assert row.score == broker.ready_score(job.priority_value)


def test_a_fan_in_is_released_only_by_its_last_dependency():
    a, b = enqueue_job("wf.add"), enqueue_job("wf.add")
    joined = enqueue_job("wf.collect", depends_on=[a, b])
    claim_and_complete(a, 1)
    assert status(joined) == Status.WAITING
    claim_and_complete(b, 2)
    assert status(joined) == Status.QUEUED
    assert events(joined).count("released") == 1


def test_a_dependency_already_completed_releases_the_new_job_at_enqueue():
    parent = enqueue_job("wf.add")
    claim_and_complete(parent, 5)
    child = enqueue_job("wf.add", depends_on=[str(parent.id)])
    assert child.status == Status.QUEUED
    assert status(child) == Status.QUEUED
    assert outbox_actions(child) == ["enqueue"]


def test_by_default_a_failed_dependency_cancels_its_dependents_naming_it():
    parent = enqueue_job("wf.fail")
    child = enqueue_job("wf.add", depends_on=[parent])
    grandchild = enqueue_job("wf.add", depends_on=[child])
    claim_and_fail(parent)

    child_row = Job.objects.get(id=child.id)
    assert child_row.status == Status.CANCELLED
    assert str(parent.id) in child_row.last_error
    log = JobLog.objects.get(job_id=child.id, event="dependency_failed")
    assert log.extra == {"dependency": str(parent.id), "dependency_status": "failed"}
    # The cancel settles the child in turn: its own dependent goes with it, naming the child.
    assert status(grandchild) == Status.CANCELLED
    assert str(child.id) in Job.objects.get(id=grandchild.id).last_error
    assert JobWait.objects.get(job_id=grandchild.id).blocked_by_id == child.id


def test_on_failure_continue_runs_the_dependent_anyway():
    parent = enqueue_job("wf.fail")
    child = enqueue_job("wf.add", depends_on=[parent], on_failure="continue")
    claim_and_fail(parent)
    assert status(child) == Status.QUEUED
    assert events(child) == ["enqueued", "released"]


def test_cancelling_a_dependency_cancels_its_dependents():
    parent = enqueue_job("wf.add")
    child = enqueue_job("wf.add", depends_on=[parent])
    cancel_job(parent.id)
    assert status(child) == Status.CANCELLED
    assert events(child) == ["enqueued", "dependency_failed"]


def test_retrying_a_failed_step_resumes_the_steps_its_failure_cancelled():
    parent = enqueue_job("wf.fail")
    child = enqueue_job("wf.add", depends_on=[parent])
    grandchild = enqueue_job("wf.add", depends_on=[child])
    claim_and_fail(parent)
    assert status(grandchild) == Status.CANCELLED

    retry_job(parent.id)

    assert status(parent) == Status.QUEUED
    assert status(child) == Status.WAITING
    assert status(grandchild) == Status.WAITING
    assert events(child)[-1] == "resumed"
    assert JobWait.objects.get(job_id=child.id).blocked_by_id is None
    claim_and_complete(parent, 1)
    assert status(child) == Status.QUEUED
    assert status(grandchild) == Status.WAITING


def test_a_cancelled_waiting_job_is_not_released_later():
    parent = enqueue_job("wf.add")
    child = enqueue_job("wf.add", depends_on=[parent])
    cancel_job(child.id)
    claim_and_complete(parent, 1)
    assert status(child) == Status.CANCELLED
    assert "released" not in events(child)


def test_a_missing_dependency_is_refused_and_nothing_is_written():
    before = Job.objects.count()
    with pytest.raises(InvalidWorkflow, match="does not exist"):
        enqueue_job("wf.add", depends_on=["0190aaaa-0000-7000-8000-000000000000"])
    assert Job.objects.count() == before


def test_another_owners_job_is_refused_as_a_dependency(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    hers = enqueue_job("wf.add", owner=alice)
    with pytest.raises(InvalidWorkflow, match="another owner"):
        enqueue_job("wf.add", depends_on=[hers], owner=bob)
    assert enqueue_job("wf.add", depends_on=[hers], owner=alice).status == Status.WAITING


def test_a_cycle_is_refused_before_anything_is_written():
    a = JobRequest("wf.add")
    b = JobRequest("wf.add", depends_on=[a])
    c = JobRequest("wf.add", depends_on=[b])
    a.depends_on = [c]
    before = Job.objects.count()
    with pytest.raises(JobsRejected) as rejected:
        enqueue_jobs([a, b, c])
    assert "cycle" in rejected.value.errors[0].message
    assert Job.objects.count() == before


def test_a_graph_over_the_size_limit_is_refused(queue_config):
    queue_config(WORKFLOW_MAX_STEPS=3)
    first = JobRequest("wf.add")
    requests = [first] + [JobRequest("wf.add", depends_on=[first]) for _ in range(3)]
    with pytest.raises(JobsRejected) as rejected:
        enqueue_jobs(requests)
    assert "WORKFLOW_MAX_STEPS" in rejected.value.errors[0].message
    assert not Job.objects.exists()


def test_a_rolled_back_caller_leaves_no_step_and_no_outbox_row():
    with pytest.raises(RuntimeError), transaction.atomic():
        first = JobRequest("wf.add")
        enqueue_jobs([first, JobRequest("wf.add", depends_on=[first])])
        raise RuntimeError("the caller's transaction fails")
    assert not Job.objects.exists()
    assert not JobDependency.objects.exists()
    assert not OutboxMessage.objects.exists()


def test_the_inline_runner_runs_a_chain_to_the_end():
    first = enqueue_job("wf.add", {"value": 1})
    second = enqueue_job("wf.add", {"value": 2}, depends_on=[first])
    third = enqueue_job("wf.add", {"value": 3}, depends_on=[second])
    assert run_jobs().completed == 3
    assert Job.objects.get(id=third.id).result == 6


def test_the_settle_function_writes_what_the_transition_table_says():
    """The function's literals are the table's rows (it cannot bind them: it is called from
    statements that know nothing of workflows)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'queue_settle_dependents_v2'")
        (source,) = cursor.fetchone()
    release, failed = TRANSITION_TABLE["release"], TRANSITION_TABLE["dependency_failed"]
    assert f"'{release.event}'" in source and f"'{release.level}'" in source
    assert f"'{failed.event}'" in source and f"'{failed.level}'" in source
    assert release.sources == {Status.WAITING} and release.target == Status.QUEUED
    assert f"status = '{release.target}'" in source
    assert f"status = '{failed.target}'" in source


def test_a_completion_written_with_the_next_claim_releases_its_dependents_in_that_round_trip():
    """A worker writes its completions with its next claim (one round trip, one transaction):
    the release goes with them."""
    parent = enqueue_job("wf.add")
    child = enqueue_job("wf.add", depends_on=[parent])
    other = enqueue_job("wf.add")
    (claimed,) = claim_jobs([str(parent.id)], worker_id="w")
    taken = execution.claim(
        [str(other.id)], worker_id="w", completions=[execution.Completion(claimed.id, claimed.fence, 1)]
    )
    assert [job.id for job in taken.jobs] == [str(other.id)]
    assert status(parent) == Status.COMPLETED
    assert status(child) == Status.QUEUED
    assert outbox_actions(child) == ["enqueue"]
