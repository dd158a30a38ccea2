"""cancel_job, retry_job and reenqueue_job called with ids that cannot name a job, and
cancel_jobs and retry_jobs on a selection."""

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queue_app import services
from queue_app.engine import actions
from queue_app.engine.outbox import enqueue_intent, remove_intent
from queue_app.exceptions import JobNotFound
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import ActionCounts, cancel_job, reenqueue_job, retry_job
from queue_app.states import TRANSITION_TABLE, Status

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("action", [cancel_job, retry_job, reenqueue_job])
@pytest.mark.parametrize("job_id", ["nope", None, 123, "", uuid.UUID(int=0), str(uuid.UUID(int=0))])
def test_an_id_that_names_no_job_is_job_not_found(action, job_id):
    """Not DataError or ValidationError from the database: the caller (API, admin, code)
    handles one error for every id that names no job."""
    with pytest.raises(JobNotFound):
        action(job_id)
    assert not JobLog.objects.exists()


# --- a selection at once: cancel_jobs, retry_jobs ----------------------------------------


def _seed(statuses, per_status: int) -> list[Job]:
    """``per_status`` jobs in each status, attempt 1 of 1 (claimed once), no log or outbox row yet."""
    return Job.objects.bulk_create(
        Job(
            type="demo.echo",
            queue=("default", "emails")[n % 2],
            priority_value=(-10, 0, 10)[n % 3],
            status=status,
            attempts=1,
            fence=1,
            max_attempts=1,
            worker_id="w" if status == Status.PROCESSING else "",
        )
        for status in statuses
        for n in range(per_status)
    )


def _expected_outbox(transition, job: Job) -> list[tuple]:
    """The outbox rows the single-job path writes for ``job`` as ``transition`` left it."""
    if transition.outbox is None:
        return []
    if transition.outbox == OutboxMessage.Action.REMOVE:
        row = remove_intent(job.id, job.queue, job.enqueued_at)
    else:
        assert transition.outbox == OutboxMessage.Action.ENQUEUE, transition
        row = enqueue_intent(job.id, job.queue, job.priority_value, job.enqueued_at)
    return [(row.action, row.queue, row.score, row.member, row.to_head)]


SELECTION_ACTIONS = {"cancel": services.cancel_jobs, "retry": services.retry_jobs}
# The transitions each applies, by the status a job leaves.
SELECTION_TRANSITIONS = {"cancel": actions.CANCEL_TRANSITIONS, "retry": actions.RETRY_TRANSITIONS}


def _transition_from(name: str, status: str):
    rows = [TRANSITION_TABLE[each] for each in SELECTION_TRANSITIONS[name]]
    return next((row for row in rows if status in row.sources), None)


@pytest.mark.parametrize("name", SELECTION_ACTIONS)
def test_a_selection_changes_every_job_it_applies_to_in_the_same_statements_for_any_size(name):
    """Each job by its transition in states.TRANSITION_TABLE, as record_transitions' other
    callers (the batched completion, the rescue) do: one UPDATE for the set, one insert of
    log rows and one of outbox rows, however many jobs; each job's rows exactly those the
    single-job path writes (tests/pipeline/test_transitions.py walks that path)."""
    queries = {}
    for size in (2, 40):
        JobLog.objects.all().delete()
        OutboxMessage.objects.all().delete()
        Job.objects.all().delete()
        jobs = _seed(Status.values, size)
        selection = [job.id for job in jobs] + [uuid.uuid4(), "not-an-id"]
        with CaptureQueriesContext(connection) as captured:
            counts = SELECTION_ACTIONS[name](selection, reason="tidy-up")
        queries[size] = len(captured)

        moved = [job for job in jobs if _transition_from(name, job.status)]
        assert moved and counts.changed == len(moved)
        after = Job.objects.in_bulk([job.id for job in jobs])
        for job in jobs:
            row = _transition_from(name, job.status)
            logs = list(JobLog.objects.filter(job_id=job.id).values_list("event", "level", "message"))
            outbox = list(
                OutboxMessage.objects.filter(job_id=job.id).values_list(
                    "action", "queue", "score", "member", "to_head"
                )
            )
            if row is not None:
                assert after[job.id].status == row.target
                assert logs == [(row.event, row.level, "tidy-up")]
                assert outbox == _expected_outbox(row, after[job.id])
            else:
                assert after[job.id].status == job.status
                assert logs == [] and outbox == []
    assert queries[40] == queries[2], queries


def test_a_retried_selection_may_run_once_more_and_is_queued_now():
    jobs = _seed([Status.FAILED, Status.CANCELLED], 3)
    services.retry_jobs([job.id for job in jobs])
    for job in Job.objects.filter(id__in=[job.id for job in jobs]):
        assert (job.status, job.attempts, job.max_attempts) == ("queued", 1, 2)
        assert job.completed_at is None and job.next_retry_at is None and job.result is None


def test_a_retry_that_raises_max_attempts_says_so_in_its_log_row_and_its_counts():
    """Attempts are never reset (they number the attempts in the job's log): a job that used every attempt
    runs once more because its max_attempts rises, and that is recorded, not silent."""
    used_up = _seed([Status.FAILED], 2)  # attempt 1 of 1
    with_attempts_left = Job.objects.create(
        type="demo.echo", status=Status.CANCELLED, attempts=1, fence=1, max_attempts=5
    )
    counts = services.retry_jobs([*(job.id for job in used_up), with_attempts_left.id])
    assert counts == ActionCounts(changed=3, max_attempts_raised=2)
    for job in used_up:
        extra = JobLog.objects.get(job_id=job.id, event="retried").extra
        assert extra == {"max_attempts_before": 1, "max_attempts": 2}
    extra = JobLog.objects.get(job_id=with_attempts_left.id, event="retried").extra
    assert extra == {"max_attempts_before": 5, "max_attempts": 5}
    assert Job.objects.get(id=with_attempts_left.id).max_attempts == 5


def test_retry_job_records_max_attempts_before_and_after():
    [job] = _seed([Status.FAILED], 1)
    retried = retry_job(job.id)
    assert (retried.attempts, retried.max_attempts) == (1, 2)
    entry = JobLog.objects.get(job_id=job.id, event="retried")
    assert entry.extra == {"max_attempts_before": 1, "max_attempts": 2}


def test_a_selection_larger_than_a_batch_runs_in_batches(monkeypatch):
    monkeypatch.setattr(actions, "ACTION_BATCH_SIZE", 3)
    jobs = _seed([Status.QUEUED, Status.COMPLETED], 4)
    with CaptureQueriesContext(connection) as captured:
        counts = services.cancel_jobs([job.id for job in jobs])
    assert counts.changed == 4
    assert Job.objects.filter(status=Status.CANCELLED).count() == 4
    updates = [query for query in captured if query["sql"].lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 3  # 8 ids, 3 per batch


@pytest.mark.parametrize("name", SELECTION_ACTIONS)
def test_a_selection_of_nothing_changes_nothing(name):
    assert SELECTION_ACTIONS[name]([], reason="none") == ActionCounts(changed=0)
    assert SELECTION_ACTIONS[name](["nope", None], reason="none") == ActionCounts(changed=0)
    assert not JobLog.objects.exists()
