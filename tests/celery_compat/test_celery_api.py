"""The Celery task API on the queue, without a worker: how each task option and call maps
to the queue's handler options and jobs, what is refused, and how AsyncResult reads a job.

Celery's documented behaviour is the reference: the Tasks guide ("Retrying", "Automatic
retry for known exceptions", the option list) and the Calling guide (apply_async options).
"""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from queue_app import handlers
from queue_app.contrib.celery import AsyncResult, Celery, Task, shared_task, signature, states
from queue_app.contrib.celery.exceptions import (
    MaxRetriesExceededError,
    NotRegistered,
    Retry,
    SoftTimeLimitExceeded,
    TaskError,
    TaskRevokedError,
    TimeoutError,
)
from queue_app.contrib.celery.task import MAX_ATTEMPTS_LIMIT, CeleryBackoff
from queue_app.engine import execution, job_requests
from queue_app.engine.execution import ClaimedJob
from queue_app.exceptions import InvalidJob, JobTimeLimitExceeded, RetryAfter
from queue_app.handlers import get_handler
from queue_app.models import Job
from queue_app.services import cancel_job
from tests.celery_compat.conftest import TUTORIALS
from tests.helpers import PROJECT_ROOT, child_env, claim_jobs

app = Celery("api", broker="redis://ignored", set_as_current=False, task_default_queue="default")


@app.task(bind=True, max_retries=2, default_retry_delay=7)
def bound(self, x, y=1):
    """Retries on request; returns its request as it saw it."""
    if x == "retry":
        raise self.retry(exc=ConnectionError("down"))
    if x == "countdown":
        raise self.retry(countdown=3)
    if x == "implicit":
        try:
            raise KeyError("sku")
        except KeyError:
            raise self.retry(countdown=1)
    return {"id": self.request.id, "retries": self.request.retries, "direct": self.request.called_directly}


@shared_task(
    name="api.options",
    queue="default",
    priority=7,
    autoretry_for=(ConnectionError,),
    dont_autoretry_for=(ConnectionRefusedError,),
    retry_backoff=3,
    retry_backoff_max=50,
    retry_jitter=False,
    soft_time_limit=4,
    time_limit=9,
    max_retries=None,
    acks_late=True,
    ignore_result=True,
)
def options(n):
    return n


@shared_task
def plain(n):
    return n


def running(task: Task, attempt: int) -> object:
    """Set the running job as a worker does, for the task's handler (no database)."""
    return handlers._current_job.set(
        ClaimedJob(
            id="00000000-0000-0000-0000-000000000001",
            type=task.name,
            queue="default",
            payload={},
            attempt=attempt,
            max_attempts=3,
            fence=attempt,
        )
    )


# --- tasks as handlers ------------------------------------------------------------------


def test_a_task_registers_an_internal_handler_named_as_celery_names_it():
    spec = get_handler(bound.name)
    assert bound.name == "tests.celery_compat.test_celery_api.bound"
    assert plain.name == "tests.celery_compat.test_celery_api.plain"
    assert spec.internal and bound.name not in handlers.registered_types(public=True)
    # Celery's defaults: max_retries=3 (4 attempts here), only self.retry() retries.
    plain_spec = get_handler(plain.name)
    assert plain_spec.max_attempts == 4 and plain_spec.retry_on == ()
    assert plain_spec.backoff == CeleryBackoff(countdown=180)


def test_task_options_become_the_handlers_options():
    spec = get_handler("api.options")
    assert spec.max_attempts == MAX_ATTEMPTS_LIMIT == job_requests.MAX_ATTEMPTS_LIMIT  # max_retries=None
    assert spec.time_limit == 4  # the soft limit; the hard one is the queue's grace later
    assert spec.retry_on == (ConnectionError,)
    assert ConnectionRefusedError in spec.give_up_on and MaxRetriesExceededError in spec.give_up_on
    assert spec.backoff == CeleryBackoff(countdown=180, factor=3, maximum=50, jitter=False)
    # Celery's exponential backoff: factor * 2**retries, capped; without jitter, exactly.
    assert [spec.backoff(attempt, None) for attempt in (1, 2, 3, 4, 5)] == [3, 6, 12, 24, 48]
    assert spec.backoff(6, None) == 50


def test_full_jitter_backoff_draws_up_to_celerys_countdown():
    backoff = CeleryBackoff(countdown=180, factor=1, maximum=600)
    draws = [backoff(4, None) for _ in range(500)]
    assert all(0 <= draw <= 8 for draw in draws) and max(draws) > 6


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate_limit": "10/m"}, NotImplementedError, "rate limits are per queue here"),
        ({"serializer": "pickle"}, ValueError, "payloads are JSON here"),
        ({"colour": "blue"}, TypeError, "unknown task option"),
        ({"max_retries": -1}, ValueError, "max_retries must be a whole number"),
        ({"base": dict}, TypeError, "base must be a subclass"),
    ],
)
def test_task_options_without_a_meaning_here_are_refused(options, error, message):
    with pytest.raises(error, match=message):
        shared_task(**options)(lambda: None)


def test_a_base_class_with_celerys_hooks_is_refused():
    class Audited(Task):
        def on_failure(self, exc, task_id, args, kwargs, einfo):
            pass

    with pytest.raises(NotImplementedError, match="on_failure"):
        shared_task(base=Audited, name="api.audited")(lambda: None)


def test_a_base_class_gives_its_attributes_to_the_task():
    class Shipping(Task):
        carrier = "post"
        max_retries = 1

    task = shared_task(base=Shipping, name="api.shipping")(lambda: None)
    assert isinstance(task, Shipping) and task.carrier == "post"
    assert get_handler("api.shipping").max_attempts == 2


def test_a_task_called_directly_runs_here_with_a_direct_request():
    assert bound(5) == {"id": None, "retries": 0, "direct": True}
    assert plain.run(3) == 3
    with pytest.raises(ConnectionError):
        bound("retry")  # a direct call's retry re-raises its exc, as in Celery


# --- self.retry() -------------------------------------------------------------------------


def test_retry_raises_retry_after_with_its_countdown_and_cause():
    token = running(bound, attempt=1)
    try:
        with pytest.raises(Retry) as caught:
            get_handler(bound.name).func({"args": ["retry"], "kwargs": {}})
        assert isinstance(caught.value, RetryAfter) and caught.value.seconds == 7  # default_retry_delay
        assert (
            isinstance(caught.value.__cause__, ConnectionError) and caught.value.exc is caught.value.__cause__
        )
        with pytest.raises(Retry) as caught:
            get_handler(bound.name).func({"args": ["countdown"], "kwargs": {}})
        assert caught.value.seconds == 3 and caught.value.__cause__ is None
        # Without exc, the error being handled is the cause the job records.
        with pytest.raises(Retry) as caught:
            get_handler(bound.name).func({"args": ["implicit"], "kwargs": {}})
        assert isinstance(caught.value.__cause__, KeyError)
        assert execution.error_summary(caught.value) == "KeyError: 'sku'"
    finally:
        handlers._current_job.reset(token)


def test_retry_with_no_retry_left_raises_the_error_or_max_retries_exceeded():
    token = running(bound, attempt=3)  # max_retries=2: this is the last attempt
    try:
        with pytest.raises(ConnectionError, match="down"):
            get_handler(bound.name).func({"args": ["retry"], "kwargs": {}})
        with pytest.raises(MaxRetriesExceededError, match="Can't retry"):
            get_handler(bound.name).func({"args": ["countdown"], "kwargs": {}})
    finally:
        handlers._current_job.reset(token)


def test_the_request_names_the_job_and_counts_earlier_attempts():
    token = running(bound, attempt=2)
    try:
        outcome = get_handler(bound.name).func({"args": [1], "kwargs": {"y": 2}})
    finally:
        handlers._current_job.reset(token)
    assert outcome == {"id": "00000000-0000-0000-0000-000000000001", "retries": 1, "direct": False}


@pytest.mark.parametrize("call", [{"throw": False}, {"args": (1,)}, {"queue": "other"}])
def test_retry_forms_the_queue_cannot_honour_are_refused(call):
    token = running(bound, attempt=1)
    try:
        with pytest.raises(NotImplementedError):
            bound.retry(**call)
    finally:
        handlers._current_job.reset(token)


def test_an_expired_payload_is_revoked_before_the_function_runs():
    token = running(plain, attempt=1)
    past = (timezone.now() - timedelta(seconds=1)).isoformat()
    try:
        with pytest.raises(TaskRevokedError, match="expired"):
            get_handler(plain.name).func({"args": [1], "kwargs": {}, "expires": past})
    finally:
        handlers._current_job.reset(token)


def test_celerys_time_limit_exceptions_are_the_queues():
    assert SoftTimeLimitExceeded is JobTimeLimitExceeded


# --- sending ------------------------------------------------------------------------------

db = pytest.mark.django_db(transaction=True)


@db
def test_apply_async_writes_the_job_celerys_options_describe():
    before = timezone.now()
    result = options.apply_async((1,), countdown=30, expires=60, priority=9)
    job = Job.objects.get(id=result.id)
    assert job.type == "api.options" and job.queue == "default" and job.priority_value == 9
    assert job.payload["args"] == [1] and job.payload["kwargs"] == {}
    assert job.max_attempts == MAX_ATTEMPTS_LIMIT
    assert before + timedelta(seconds=30) <= job.next_retry_at <= timezone.now() + timedelta(seconds=30)
    expires = datetime.fromisoformat(job.payload["expires"])
    assert before + timedelta(seconds=60) <= expires <= timezone.now() + timedelta(seconds=60)
    assert Job.objects.get(id=options.delay(2).id).priority_value == 7  # the task's own


@db
def test_a_naive_eta_is_utc_and_countdown_wins_over_eta():
    eta = datetime(2030, 1, 2, 3, 4, 5)
    job = Job.objects.get(id=plain.apply_async((1,), eta=eta).id)
    assert job.next_retry_at == eta.replace(tzinfo=UTC)
    job = Job.objects.get(id=plain.apply_async((1,), eta=eta, countdown=0).id)
    assert job.next_retry_at is None


@db
def test_send_task_sends_a_registered_task_by_name():
    result = app.send_task("api.options", args=(5,))
    assert Job.objects.get(id=result.id).payload["args"] == [5]
    with pytest.raises(NotRegistered):
        app.send_task("api.nowhere")


@db
def test_a_signature_sends_its_task_with_its_arguments_and_options():
    result = signature("api.options", args=(1,), countdown=60).delay()
    job = Job.objects.get(id=result.id)
    assert job.payload["args"] == [1] and job.next_retry_at is not None


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: plain.delay(1, 2), TypeError, "too many positional arguments"),
        (lambda: bound.delay(), TypeError, "missing a required argument: 'x'"),
        (lambda: plain.delay(object()), TypeError, "Unsupported type"),
        (lambda: plain.apply_async((1,), link=plain.s()), NotImplementedError, "chain the next task"),
        (
            lambda: plain.apply_async((1,), task_id="mine"),
            NotImplementedError,
            "the queue makes each job's id",
        ),
        (lambda: plain.apply_async((1,), routing_key="x"), NotImplementedError, "pass queue="),
        (lambda: plain.apply_async((1,), serializer="pickle"), ValueError, "payloads are JSON"),
        (lambda: plain.apply_async((1,), colour="blue"), TypeError, "unexpected option 'colour'"),
        (lambda: plain.apply_async((1,), countdown="soon"), TypeError, "countdown must be a number"),
        (lambda: plain.apply_async((1,), eta="tomorrow"), TypeError, "eta must be a datetime"),
    ],
)
def test_calls_the_queue_cannot_honour_are_refused_before_anything_is_written(call, error, message):
    with pytest.raises(error, match=message):
        call()


@db
@pytest.mark.parametrize(
    ("options", "field"), [({"queue": "nowhere"}, "queue"), ({"priority": 255}, "priority")]
)
def test_a_queue_or_priority_the_queue_does_not_have_is_refused_naming_the_field(options, field):
    with pytest.raises(InvalidJob) as caught:
        plain.apply_async((1,), **options)
    assert caught.value.field == field
    assert not Job.objects.exists()


@db
def test_task_always_eager_is_refused_rather_than_ignored():
    eager = Celery("eager", set_as_current=False, task_always_eager=True)
    task = eager.task(name="api.eager")(lambda: None)
    with pytest.raises(NotImplementedError, match="task_always_eager"):
        task.delay()


def test_the_app_reads_its_config_lazily_and_refuses_to_start_a_worker(settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = "default"
    settings.CELERY_RESULT_EXPIRES = 3600
    configured = Celery("configured", set_as_current=False)
    configured.config_from_object("django.conf:settings", namespace="CELERY")
    assert configured.conf.task_default_queue == "default" and configured.conf["result_expires"] == 3600
    configured.conf.update(result_expires=10)
    assert configured.conf.result_expires == 10
    with pytest.raises(NotImplementedError, match="runworker"):
        configured.start()


# --- AsyncResult ------------------------------------------------------------------------


@db
def test_async_result_reads_each_state_from_the_job():
    queued = plain.delay(1)
    assert (queued.state, queued.result, queued.ready()) == (states.PENDING, None, False)
    assert AsyncResult("not-a-job-id").state == states.PENDING  # Celery's answer for any unknown id
    [claimed] = claim_jobs([queued.id], worker_id="w")
    assert queued.state == states.STARTED
    execution.fail_job(
        claimed.id, claimed.fence, "ValueError: bad input", delay=0, error_class="builtins.ValueError"
    )
    assert queued.state == states.RETRY and isinstance(queued.result, ValueError)
    assert not queued.ready()
    [claimed] = claim_jobs([queued.id], worker_id="w")
    execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, {"n": 1})])
    assert (queued.state, queued.result, queued.successful()) == (states.SUCCESS, {"n": 1}, True)
    assert queued.get(timeout=1) == {"n": 1} and queued.date_done is not None and queued.traceback is None


@db
def test_a_failure_is_rebuilt_as_its_exception_or_a_task_error():
    result = plain.delay(1)
    [claimed] = claim_jobs([result.id], worker_id="w")
    execution.fail_job(
        claimed.id,
        claimed.fence,
        "KeyError: 'sku'",
        retry=False,
        error_class="builtins.KeyError",
        traceback="Traceback (most recent call last):\nKeyError: 'sku'\n",
    )
    assert result.failed() and result.traceback.startswith("Traceback")
    error = result.get(propagate=False)
    assert isinstance(error, KeyError) and error.args == ("'sku'",)
    with pytest.raises(KeyError):
        result.get()
    moved = plain.delay(2)
    [claimed] = claim_jobs([moved.id], worker_id="w")
    execution.fail_job(claimed.id, claimed.fence, "Gone: x", retry=False, error_class="shop.errors.Gone")
    assert isinstance(moved.result, TaskError) and str(moved.result) == "Gone: x"


@db
def test_revoke_cancels_a_queued_job_and_get_times_out_on_one_not_ready():
    result = plain.delay(1)
    with pytest.raises(TimeoutError, match="timed out"):
        result.get(timeout=0.2, interval=0.05)
    result.revoke()
    assert result.state == states.REVOKED and result.ready()
    with pytest.raises(TaskRevokedError):
        result.get()
    result.revoke()  # nothing happens to a finished one
    assert Job.objects.get(id=result.id).status == "cancelled"


@db
def test_async_result_compares_and_prints_as_its_id():
    result = plain.delay(1)
    assert result == AsyncResult(result.id) == result.id and str(result) == result.id
    assert plain.AsyncResult(result.id).state == states.PENDING
    cancel_job(result.id)


@pytest.mark.parametrize(("task", "issues"), [("proj.tasks.add", 0), ("proj.tasks.nowhere", 1)])
def test_a_beat_schedule_entry_moves_to_schedules_naming_the_task(task, issues):
    """``beat_schedule = {"add": {"task": "proj.tasks.add", "schedule": crontab(), "args": (2, 2)}}``
    becomes a JOBQUEUE SCHEDULES entry whose type is the task's name: the check at start-up
    finds the task (imported by the Celery app's config), or names the one it cannot find."""
    schedule = {"add": {"type": task, "cron": "* * * * *", "payload": {"args": [2, 2], "kwargs": {}}}}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=PROJECT_ROOT,
        env=child_env(
            DJANGO_SETTINGS_MODULE="tests.celery_compat.mysite.settings",
            PYTHONPATH=str(TUTORIALS),
            JOBQUEUE_SCHEDULES=json.dumps(schedule),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode == 0) is (issues == 0), done.stderr
    assert f"identified {issues or 'no'} issue" in done.stdout + done.stderr


@db
def test_a_canvas_is_one_workflow_whose_steps_name_the_results_they_take():
    """Celery's canvas guide: a chained task gets its parent's result first, a task after a
    group the group's results as a list, in order; an immutable one gets nothing."""
    from queue_app.contrib.celery import chain, group
    from queue_app.engine.workflows import dependency_ids

    res = (plain.s() | group(plain.s(), plain.si(5)) | plain.s()).apply_async((1,))
    last = Job.objects.get(id=res.id)
    group_members = [Job.objects.get(id=member.id) for member in res.parent]
    first = Job.objects.get(id=res.parent.parent.id)
    assert first.payload == {"args": [1], "kwargs": {}}
    assert [job.payload for job in group_members] == [
        {"args": [], "kwargs": {}, "parents": 0},
        {"args": [5], "kwargs": {}},  # immutable: waits, takes nothing
    ]
    assert all(dependency_ids(job.id) == [str(first.id)] for job in group_members)
    assert last.payload["parents"] == [0, 1]
    assert dependency_ids(last.id) == [str(job.id) for job in group_members]
    assert {job.workflow_step.workflow_id for job in (first, last, *group_members)} == {
        last.workflow_step.workflow_id
    }
    # All or nothing: a step the queue refuses leaves no step written.
    with pytest.raises(NotImplementedError, match="countdown= on"):
        chain(plain.s(1), plain.s().set(countdown=3)).delay()
    assert Job.objects.count() == 4


@db
def test_a_canvas_sent_in_a_rolled_back_transaction_never_existed():
    from django.db import transaction

    from queue_app.contrib.celery import chord

    with pytest.raises(RuntimeError), transaction.atomic():
        chord([plain.s(1), plain.s(2)], plain.s()).delay()
        assert Job.objects.count() == 3
        raise RuntimeError("rolled back")
    assert not Job.objects.exists()
