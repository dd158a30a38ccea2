"""The django.tasks contract, ported to this backend and run by the real processes.

Each test names the test it ports: Django's ``tests/tasks/`` (test_tasks.py,
test_immediate_backend.py, test_dummy_backend.py) or django-tasks'
``tests/tests/test_database_backend.py`` (its worker tests). Tasks run in a real
``runworker`` process fed by a real ``runrelay`` process. Where this backend
deliberately differs from the immediate backend (a task runs later, on a worker,
and joins the caller's transaction) the port checks the backend's behaviour and
says so.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core import checks
from django.db import transaction
from django.db.models.functions import Now
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.test import override_settings
from django.utils import timezone

from queue_app import broker
from queue_app.exceptions import JobCancelled, JobTimeLimitExceeded, WorkerProcessDied
from queue_app.models import Job
from queue_app.services import cancel_job
from tests.conformance import tasks as test_tasks
from tests.helpers import child_env, kill_group, manage, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

WORKER = "conformance"
BACKEND = "queue_app.tasks_backend.JobQueueBackend"


@pytest.fixture
def relay():
    """A real ``runrelay`` process for the test."""
    process = manage("runrelay", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield process
    kill_group(process)


def run_worker(**env: str) -> str:
    """Run ``runworker --burst --with-scheduled`` until no queued job is left (retries and
    later starts included); returns what it logged."""
    process = manage(
        "runworker",
        "--burst",
        "--with-scheduled",
        "--name",
        WORKER,
        env=child_env(LOG_LEVEL="DEBUG", **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = process.communicate(timeout=120)
    finally:
        kill_group(process)
    assert process.returncode == 0, stderr
    return stderr


def _run_until_exit(*args: str, env: dict[str, str]) -> None:
    process = manage(*args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert process.wait(timeout=60) == 0
    finally:
        kill_group(process)


# --- enqueue and results (Django test_dummy_backend / test_tasks) -----------------------


def test_enqueue_task_is_ready_until_a_worker_runs_it():
    """Django test_dummy_backend.DummyBackendTestCase.test_enqueue_task."""
    result = test_tasks.noop_task.enqueue(1, two=3)

    assert result.status == TaskResultStatus.READY
    assert result.is_finished is False
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None, None, None)
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    assert result.task == test_tasks.noop_task
    assert (result.args, result.kwargs) == ([1], {"two": 3})
    assert result.attempts == 0 and result.worker_ids == [] and result.errors == []
    assert result.backend == "default"


def test_get_result_equals_the_enqueued_result():
    """Django test_tasks.TaskTestCase.test_get_result and test_dummy_backend test_get_result."""
    result = default_task_backend.enqueue(test_tasks.noop_task, (), {})

    assert test_tasks.noop_task.get_result(result.id) == result
    assert default_task_backend.get_result(result.id) == result


def test_enqueue_and_get_result_async():
    """Django test_tasks.TaskTestCase.test_enqueue_task_async and test_get_result_async."""

    async def scenario():
        result = await test_tasks.noop_task.aenqueue()
        return result, await test_tasks.noop_task.aget_result(result.id)

    result, fetched = async_to_sync(scenario)()
    assert result.status == TaskResultStatus.READY
    assert fetched == result


def test_refresh_result_without_a_run_changes_nothing():
    """Django test_tasks.TaskTestCase.test_refresh_result."""
    result = test_tasks.noop_task.enqueue()
    original = dataclasses.asdict(result)

    result.refresh()

    assert dataclasses.asdict(result) == original


def test_get_missing_result():
    """Django test_tasks.TaskTestCase.test_get_missing_result (any id, UUID or not)."""
    for result_id in ("123", "00000000-0000-0000-0000-000000000000"):
        with pytest.raises(TaskResultDoesNotExist):
            test_tasks.noop_task.get_result(result_id)


@pytest.mark.parametrize("path", ["tests.conformance.renamed.noop_task", "tests.conformance.tasks.os"])
def test_a_job_whose_task_cannot_be_loaded_is_refused_naming_the_job_and_the_path(relay, path):
    """A task module renamed or removed after the enqueue (a deploy), or a path that names no
    @task: get_result and refresh raise InvalidTask (Django's error for a task it cannot use)
    naming both, and the worker fails the job at once, though it allows another attempt."""
    result = test_tasks.always_fails.enqueue()  # max_attempts=2
    job = Job.objects.get(id=result.id)
    Job.objects.filter(id=job.id).update(payload={**job.payload, "task": path})

    for read in (lambda: default_task_backend.get_result(result.id), result.refresh):
        with pytest.raises(InvalidTask, match=f"job {result.id}: {path}"):
            read()
    run_worker()
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("failed", 1)
    assert job.last_error_class == "queue_app.tasks_backend.UnknownTask"


def test_get_incorrect_result():
    """Django test_tasks.TaskTestCase.test_get_incorrect_result."""
    result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, (), {})
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        test_tasks.noop_task.get_result(result.id)


def test_enqueue_with_invalid_argument():
    """Django test_tasks.TaskTestCase.test_enqueue_with_invalid_argument: nothing is written."""
    with pytest.raises(TypeError, match="Unsupported type"):
        test_tasks.noop_task.enqueue(timezone.now())
    assert not Job.objects.exists()


def test_validate_on_enqueue():
    """Django test_immediate_backend.test_validate_on_enqueue."""
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}):
        with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
            test_tasks.noop_task.using(queue_name="unknown_queue").enqueue()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"priority": 5.0}, "priority must be an int, not float"),
        ({"priority": True}, "priority must be an int, not bool"),
        ({"run_after": datetime(2400, 1, 1, tzinfo=UTC)}, "run_after must not be later than 2305-06-05"),
    ],
)
def test_what_the_queue_cannot_store_is_an_invalid_task(changes, message):
    """Django test_tasks.TaskTestCase.test_invalid_priority raises InvalidTask from ``using``;
    deliberate difference: Django's validate_task (backends/base.py) lets 5.0 and True through
    as whole numbers and any run_after, but the job needs an int and a start its queue orders."""
    with pytest.raises(InvalidTask, match=message):
        test_tasks.noop_task.using(**changes)
    assert not Job.objects.exists()


def test_result_task_carries_what_it_was_enqueued_with():
    """django-tasks test_database_backend: the stored task keeps priority, queue, run_after."""
    run_after = timezone.now() + timedelta(hours=1)
    with override_settings(
        JOBQUEUE={"QUEUES": "default,reports"},
        TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default", "reports"]}},
    ):
        enqueued = test_tasks.noop_task.using(priority=7, queue_name="reports", run_after=run_after)
        result = enqueued.enqueue()
        fetched = default_task_backend.get_result(result.id)
    assert fetched.task == enqueued
    assert (fetched.task.priority, fetched.task.queue_name, fetched.task.run_after) == (
        7,
        "reports",
        run_after,
    )


def test_enqueued_at_is_when_enqueue_ran_not_run_after():
    """Django test_immediate_backend.test_enqueue_task (enqueued_at), for a deferred task."""
    before = timezone.now()
    result = test_tasks.noop_task.using(run_after=before + timedelta(hours=1)).enqueue()
    after = timezone.now()

    stored = default_task_backend.get_result(result.id)
    assert stored.enqueued_at == result.enqueued_at
    # Within a second of the call (the database clock stamps it).
    assert before - timedelta(seconds=1) <= stored.enqueued_at <= after + timedelta(seconds=1)


def test_enqueue_sends_task_enqueued_and_logs_it(caplog):
    """Django test_immediate_backend.test_enqueue_logs (the enqueue line; the state lines
    come from the worker, see test_worker_logs_state_lines)."""
    received = []

    def receiver(sender, task_result, **kwargs):
        received.append(task_result)

    from django.tasks.signals import task_enqueued

    task_enqueued.connect(receiver)
    try:
        with caplog.at_level(logging.DEBUG, logger="django.tasks"):
            result = test_tasks.noop_task.enqueue()
    finally:
        task_enqueued.disconnect(receiver)
    assert received == [result]
    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert len(lines) == 1 and "enqueued" in lines[0] and result.id in lines[0]


def test_one_alias_does_not_read_another_alias_results():
    """django-tasks test_database_backend: results are per backend alias."""
    aliases = {"default": {"BACKEND": BACKEND}, "other": {"BACKEND": BACKEND}}
    with override_settings(TASKS=aliases):
        result = test_tasks.noop_task.using(backend="other").enqueue()
        assert Job.objects.get(id=result.id).backend == "other"
        assert task_backends["other"].get_result(result.id).task.backend == "other"
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(result.id)


def test_enqueue_joins_the_callers_transaction():
    """Deliberate difference from Django's ImmediateBackendTransactionTestCase: nothing
    runs at enqueue; a rolled-back enqueue leaves no job."""
    with pytest.raises(RuntimeError), transaction.atomic():
        result = test_tasks.noop_task.enqueue()
        assert result.status == TaskResultStatus.READY
        raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


def test_cancelled_job_reads_failed_with_its_cause():
    """A cancelled job is FAILED with a JobCancelled error (django.tasks has no cancelled state)."""
    result = test_tasks.noop_task.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    cancel_job(result.id)

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is JobCancelled
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


# --- checks --------------------------------------------------------------------------------


def test_a_tasks_queue_the_job_queue_does_not_serve_is_a_check_error():
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default", "nightly"]}}):
        errors = default_task_backend.check()
    assert [e.id for e in errors] == ["queue_app.E102"] and "'nightly'" in errors[0].msg


def test_bad_options_are_check_errors():
    options = {"MAX_ATTEMPTS": 0, "RETRIES": 3}
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "OPTIONS": options}}):
        ids = sorted(e.id for e in checks.run_checks())
    assert "queue_app.E103" in ids and "queue_app.E104" in ids


def test_missing_app_is_a_check_error_not_a_crash():
    """``check`` in a project whose INSTALLED_APPS lacks queue_app reports it as an error."""
    script = (
        "import django; from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['django.contrib.contenttypes'],"
        f" TASKS={{'default': {{'BACKEND': '{BACKEND}'}}}})\n"
        "django.setup()\n"
        "import django.tasks  # registers the TASKS check, as any module using @task does\n"
        "from django.core import checks\n"
        "print(sorted(e.id for e in checks.run_checks()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert out.returncode == 0, out.stderr
    assert "queue_app.E101" in out.stdout


# --- running on the worker (Django test_immediate_backend, django-tasks worker tests) ------


def test_enqueue_task_runs_on_the_worker(relay):
    """Django test_immediate_backend.test_enqueue_task; django-tasks test_run_enqueued_task."""
    result = test_tasks.noop_task.enqueue(1, two=3)
    run_worker()
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished is True
    assert result.started_at and result.last_attempted_at and result.finished_at
    assert result.started_at >= result.enqueued_at
    assert result.finished_at >= result.started_at
    assert result.return_value is None
    assert result.task == test_tasks.noop_task
    assert (result.args, result.kwargs) == ([1], {"two": 3})
    assert result.attempts == 1
    assert result.worker_ids == [f"{WORKER}/0"]


def test_async_task_runs_on_the_worker(relay):
    """Django test_immediate_backend.test_enqueue_task with noop_task_async, and an async
    task's return value (supports_async_task)."""
    assert default_task_backend.supports_async_task is True
    noop = test_tasks.noop_task_async.enqueue(1, two=3)
    meaning = test_tasks.calculate_meaning_of_life_async.enqueue()
    run_worker()
    noop.refresh()
    meaning.refresh()
    assert noop.status == TaskResultStatus.SUCCESSFUL and noop.return_value is None
    assert noop.task == test_tasks.noop_task_async and noop.attempts == 1
    assert meaning.status == TaskResultStatus.SUCCESSFUL and meaning.return_value == 42


def test_result(relay):
    """Django test_immediate_backend.test_result."""
    result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, [], {})
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


def test_takes_context_and_context(relay):
    """Django test_immediate_backend.test_takes_context and test_context."""
    with_id = test_tasks.get_task_id.enqueue()
    with_attempt = test_tasks.check_context.enqueue(1)
    run_worker()
    with_id.refresh()
    with_attempt.refresh()
    assert with_id.return_value == with_id.id
    assert with_attempt.status == TaskResultStatus.SUCCESSFUL


@pytest.mark.parametrize(
    ("task", "exception", "tail"),
    [
        (test_tasks.failing_task_value_error, ValueError, "ValueError: This task failed due to ValueError\n"),
        (test_tasks.complex_exception, ValueError, 'ValueError(ValueError("This task failed"))'),
        (test_tasks.complex_return_value, TypeError, "Unsupported type"),
        (test_tasks.returns_nan, TypeError, "NaN and infinity are not JSON"),
        (test_tasks.returns_nul, TypeError, "NUL character"),
        (test_tasks.returns_big_int, TypeError, "integers must fit in 64 bits"),
        (test_tasks.returns_int_keys, TypeError, "object keys must be strings"),
    ],
)
def test_catches_exception(relay, task, exception, tail):
    """Django test_immediate_backend.test_catches_exception, test_complex_exception and
    test_complex_return_value: one attempt, FAILED, the exception's class and traceback.
    Deliberate difference: a NaN, a NUL, an integer beyond 64 bits or a non-string key,
    which Django's normalize_json passes, is not JSON the job can store, so it fails as
    TypeError too (and is never announced SUCCESSFUL first)."""
    result = task.enqueue()
    stderr = run_worker()
    result.refresh()

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert result.is_finished is True
    assert result.started_at and result.last_attempted_at and result.finished_at
    assert result.finished_at >= result.started_at >= result.enqueued_at
    assert result.attempts == 1
    assert len(result.errors) == 1
    assert result.errors[0].exception_class is exception
    traceback = result.errors[0].traceback
    if tail.endswith("\n"):
        assert traceback.endswith(tail), traceback
    else:
        assert tail in traceback, traceback
    # The worker's django.tasks ERROR line names the task and state, with the traceback.
    assert f"Task id={result.id} path={task.module_path} state=FAILED" in stderr
    assert f"Task id={result.id} path={task.module_path} state=SUCCESSFUL" not in stderr


@pytest.mark.parametrize(
    ("task", "exception"),
    [
        (test_tasks.exiting_task, SystemExit),
        (test_tasks.interrupting_task, KeyboardInterrupt),
        (test_tasks.calling_exit_task, SystemExit),
    ],
)
def test_a_task_that_exits_or_is_interrupted_is_failed_and_the_worker_goes_on(relay, task, exception):
    """Django's immediate backend (backends/immediate.py) catches a task's BaseException and
    records the task FAILED; so does this worker: one attempt, FAILED with the exception's
    class, and the next task still runs in the same burst. Deliberate difference: the
    immediate backend re-raises KeyboardInterrupt (a user's Ctrl-C in their own process);
    raised by a task on a worker it is the task's failure, not a signal to the worker."""
    result = task.enqueue()
    after = test_tasks.calculate_meaning_of_life.enqueue()
    stderr = run_worker()
    result.refresh()
    after.refresh()

    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert result.errors[0].exception_class is exception
    assert after.status == TaskResultStatus.SUCCESSFUL and after.return_value == 42
    # task_finished was sent, as the immediate backend sends it for a SystemExit.
    assert f"Task id={result.id} path={task.module_path} state=FAILED" in stderr


def test_a_task_handed_back_at_shutdown_is_not_announced_failed(relay, tmp_path):
    """The shutdown grace period ends while the task runs: the worker hands the job back
    uncounted, so task_finished must not say FAILED (the task runs again later)."""
    started = tmp_path / "started"
    result = test_tasks.sleeping_task.enqueue(60, str(started))
    process = manage(
        "runworker",
        "--name",
        WORKER,
        env=child_env(LOG_LEVEL="DEBUG", JOBQUEUE_SHUTDOWN_GRACE_SECONDS="0.5"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Running, not only claimed: a task claimed but not yet started is handed back unannounced.
        wait_until(started.exists, message="the task to start")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        kill_group(process)
    result.refresh()

    assert result.status == TaskResultStatus.READY and result.attempts == 0
    lines = [line for line in stderr.splitlines() if f"Task id={result.id}" in line]
    assert [line.rsplit("state=", 1)[1] for line in lines] == ["RUNNING"]


def test_a_task_whose_process_is_killed_or_dies_fails_with_an_importable_class(relay):
    """Nothing inside the task raised, so the supervisor names the cause; errors[0].exception_class
    must load (Django's TaskError imports the path) rather than raise ImportError."""
    killed = test_tasks.ignores_its_time_limit.enqueue()
    died = test_tasks.kills_its_process.enqueue()
    run_worker(JOBQUEUE_DEFAULT_TIME_LIMIT_SECONDS="1", JOBQUEUE_HARD_TIME_LIMIT_GRACE_SECONDS="1")
    killed.refresh()
    died.refresh()

    assert killed.status == died.status == TaskResultStatus.FAILED
    assert killed.errors[0].exception_class is JobTimeLimitExceeded
    assert "hard time limit exceeded" in killed.errors[0].traceback
    assert died.errors[0].exception_class is WorkerProcessDied
    assert "exited with code 3" in died.errors[0].traceback


def test_a_task_held_by_a_dead_worker_fails_when_the_worker_restarts(relay):
    """A worker restarted under the same name fails the attempt its dead process held (once
    its lease has run out: before, the dead process might still be running it)."""
    result = test_tasks.sleeping_task.enqueue(60)
    short_lease = child_env(JOBQUEUE_LEASE_SECONDS="3", JOBQUEUE_HEARTBEAT_SECONDS="1")
    process = manage("runworker", "--name", WORKER, env=short_lease, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: Job.objects.filter(id=result.id, status="processing").exists())
    finally:
        kill_group(process)  # supervisor and child die without a word
    wait_until(lambda: Job.objects.filter(id=result.id, lease_expires_at__lt=Now()).exists(), timeout=10)
    run_worker()
    result.refresh()

    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is WorkerProcessDied


def test_worker_logs_state_lines(relay):
    """Django test_immediate_backend.test_enqueue_logs / test_failed_logs /
    test_successful_task_no_none_type_in_logs, for the worker's side."""
    ok = test_tasks.noop_task.enqueue()
    failing = test_tasks.failing_task_value_error.enqueue()
    stderr = run_worker()
    lines = [line for line in stderr.splitlines() if "Task id=" in line]

    assert [line for line in lines if ok.id in line] == [
        f"Task id={ok.id} path={ok.task.module_path} state=RUNNING",
        f"Task id={ok.id} path={ok.task.module_path} state=SUCCESSFUL",
    ]
    failing_lines = [line for line in lines if failing.id in line]
    assert [line.rsplit("state=", 1)[1] for line in failing_lines] == ["RUNNING", "FAILED"]
    assert "NoneType" not in "\n".join(lines)


def test_retries_are_opt_in_and_context_attempt_counts_them(relay):
    """Django's TaskContext.attempt (test_context) across a retry; retries from
    ``@task(max_attempts=2)``. Backoff shortened so the test sees both attempts."""
    result = test_tasks.fails_on_first_attempt.enqueue()
    enqueued_at = result.enqueued_at
    run_worker(JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS="0.1", JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS="0.2")
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2 and result.worker_ids == [f"{WORKER}/0", f"{WORKER}/0"]
    assert result.errors == []
    assert result.enqueued_at == enqueued_at


def test_retries_exhausted_is_failed_with_the_last_error(relay):
    result = test_tasks.always_fails.enqueue()
    run_worker(JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS="0.1", JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS="0.2")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert result.errors[0].exception_class is ValueError


def test_a_refused_return_value_is_announced_once_as_failed_after_the_last_attempt(relay):
    """With retries, task_finished (and so the state line) comes once, for the last attempt:
    a return value the job cannot store fails each attempt before anything is announced."""
    result = test_tasks.returns_nan_with_retries.enqueue()
    stderr = run_worker(JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS="0.1", JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS="0.2")
    result.refresh()

    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert result.errors[0].exception_class is TypeError
    states = [line.rsplit("state=", 1)[1] for line in stderr.splitlines() if f"Task id={result.id}" in line]
    assert states == ["RUNNING", "RUNNING", "FAILED"]


def test_worker_ids_leave_out_an_attempt_handed_back_after_an_earlier_one(relay, tmp_path):
    """Django's worker_ids (one per attempt, test_immediate_backend.test_enqueue_task) when
    attempt 1 failed on A and attempt 2 was handed back by B at shutdown, then run by C: B's
    claim is no attempt, whichever claims came before it."""
    result = test_tasks.fails_then_hangs_once.enqueue(str(tmp_path / "hung"))
    # A fails attempt 1 and exits (burst, without --with-scheduled): the retry is due 0 to 5 s later.
    retry_soon = {"JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS": "5", "JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS": "5"}
    _run_until_exit("runworker", "--burst", "--name", "A", env=child_env(**retry_soon))
    assert Job.objects.filter(id=result.id, status="queued", attempts=1).exists()
    hanging = manage(
        "runworker",
        "--name",
        "B",
        env=child_env(JOBQUEUE_SHUTDOWN_GRACE_SECONDS="0.5"),
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: (tmp_path / "hung").exists(), message="attempt 2 to start on B")
        hanging.send_signal(signal.SIGTERM)
        assert hanging.wait(timeout=60) == 0
    finally:
        kill_group(hanging)
    assert Job.objects.filter(id=result.id, status="queued", attempts=1).exists()
    _run_until_exit("runworker", "--burst", "--name", "C", env=child_env())
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL and result.attempts == 2
    assert result.worker_ids == ["A/0", "C/0"]
    assert result.return_value == ["A/0", "C/0"]  # what the task's context saw


def test_between_attempts_the_result_is_ready_without_an_error(relay):
    """A retry waiting for its time reads READY, with no error attached (django-tasks has no
    retry state; a finished failure is the only one that carries its error)."""
    result = test_tasks.always_fails.enqueue()
    process = manage(
        "runworker",
        "--name",
        WORKER,
        env=child_env(JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS="3600"),
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: Job.objects.filter(id=result.id, status="queued", attempts=1).exists(),
            message="the first attempt to fail and schedule a retry",
        )
    finally:
        kill_group(process)
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.errors == [] and result.attempts == 1 and result.finished_at is None


def test_one_attempt_by_default(relay):
    """Django's API has no retries: a failing task without max_attempts runs once."""
    result = test_tasks.failing_task_value_error.enqueue()
    assert Job.objects.get(id=result.id).max_attempts == 1


def test_options_max_attempts_is_the_backend_default():
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_ATTEMPTS": 4}}}):
        plain = test_tasks.noop_task.enqueue()
        own = test_tasks.always_fails.enqueue()
    assert Job.objects.get(id=plain.id).max_attempts == 4
    assert Job.objects.get(id=own.id).max_attempts == 2


def test_deferred_task_does_not_run_before_run_after(relay):
    """django-tasks test_database_backend run_after tests: a task due later is not run."""
    later = test_tasks.noop_task.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    now = test_tasks.noop_task.enqueue()
    process = manage("runworker", "--name", WORKER, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: default_task_backend.get_result(now.id).status == TaskResultStatus.SUCCESSFUL)
    finally:
        kill_group(process)
    assert default_task_backend.get_result(later.id).status == TaskResultStatus.READY


def test_priority_orders_tasks_across_the_full_range_fifo_within_one_value(relay, redis_client):
    """django-tasks test_database_backend's ordering of ready tasks (``-priority``, then by
    enqueue) on the real worker; Django's ``Task.priority`` range is -100..100 (test_tasks'
    test_invalid_priority bounds it), and 20 runs before 10 before 2."""
    priorities = [2, 20, -100, 10, 100, 2, 1, 50, -1, 0, 20, -100]
    labels = [f"{index}:{priority}" for index, priority in enumerate(priorities)]
    for label, priority in zip(labels, priorities, strict=True):
        test_tasks.record_run.using(priority=priority).enqueue(label)
    # Every id in Redis before the worker starts, so the first pop sees them all.
    wait_until(lambda: redis_client.zcard(broker.priority_key("default")) == len(labels))
    run_worker()

    ran = redis_client.lrange("conformance:ran", 0, -1)
    # Highest first; equal priorities in enqueue order (a stable sort keeps it).
    assert ran == sorted(labels, key=lambda label: -int(label.split(":")[1]))
