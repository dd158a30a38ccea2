"""Probe handlers: each records its executions so tests can count them."""

import asyncio
import os
import signal
import time

from django.db import connection
from django.tasks import task
from django.utils import timezone

from queue_app.exceptions import CancelRequested, LeaseLost, Snooze
from queue_app.handlers import check_time_limit, current_job, job_handler
from tests.probe import journal, retry_jobs, workflow_jobs  # noqa: F401 - registers their handlers
from tests.probe.models import Effect, Execution


def _started():
    job = current_job()
    return Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())


@job_handler("probe.run", max_attempts=5)
def run(payload):
    """Record the execution, optionally sleep, optionally fail the first N attempts."""
    execution = _started()
    time.sleep(float(payload.get("sleep", 0)))
    if execution.attempt <= int(payload.get("fail_first", 0)):
        raise RuntimeError(f"failing attempt {execution.attempt}")
    Execution.objects.filter(pk=execution.pk).update(finished_at=timezone.now())
    return {"pid": os.getpid()}


@job_handler("probe.db_sleep", max_attempts=1)
def db_sleep(payload):
    """Record the execution, then wait inside a query (PostgreSQL's pg_sleep)."""
    _started()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(%s)", [float(payload.get("sleep", 0))])


@job_handler("probe.effect", atomic=True, max_attempts=5)
def effect(payload):
    """Write a side effect in the completion transaction (exactly once per completion)."""
    time.sleep(float(payload.get("sleep", 0)))
    job = current_job()
    Effect.objects.create(job_id=job.id, attempt=job.attempt)
    return {"ok": True}


@job_handler("probe.spin", time_limit=1, max_attempts=2)
def spin(payload):
    """CPU-bound forever: only the time limit stops it."""
    _started()
    while True:
        pass


@job_handler("probe.fail", max_attempts=3, retry_backoff_base=0.2, retry_backoff_max=1)
def fail(payload):
    """Always raises, with a short backoff so tests see every attempt."""
    _started()
    raise RuntimeError("probe failure")


# Filled by ``probe.order`` when the worker runs in the test's own process.
RUN_ORDER: list[str] = []


@job_handler("probe.order")
def order(payload):
    """Record the order in which an in-process worker runs jobs (no database write)."""
    RUN_ORDER.append(current_job().id)


@job_handler("probe.stubborn", time_limit=1, max_attempts=1)
def stubborn(payload):
    """Swallows the soft time limit: only the supervisor's hard kill stops it."""
    _started()
    while True:
        try:
            time.sleep(60)
        except Exception:  # noqa: BLE001, S110 - ignoring the limit is the point
            continue


def _chaos_work(payload, attempt: int) -> None:
    # A "stubborn" job sleeps on through the worker's lease-lost interrupt (as a handler with a
    # broad except, or stuck in C code, would): a paused worker's stale attempt then reaches
    # its completion, which only the fence stops.
    until = time.monotonic() + float(payload.get("sleep", 0))
    while (left := until - time.monotonic()) > 0:
        try:
            time.sleep(left)
        except LeaseLost:
            if not payload.get("stubborn"):
                raise
    if attempt <= int(payload.get("fail_first", 0)):
        raise RuntimeError(f"failing attempt {attempt}")


@job_handler("probe.chaos", atomic=True, max_attempts=5)
def chaos(payload):
    """For the chaos run: journal the execution, sleep, maybe fail, and write an Effect
    naming the execution in the completion transaction (it rolls back if fenced)."""
    job = current_job()
    with journal.execution(job.id, job.attempt, job.fence) as execution:
        _chaos_work(payload, job.attempt)
        Effect.objects.create(job_id=job.id, attempt=job.attempt, execution=execution)
        return {"execution": execution, "attempt": job.attempt}


@job_handler("probe.chaos_plain", max_attempts=5)
def chaos_plain(payload):
    """Like ``probe.chaos`` without a database write: its completion is batched by the worker."""
    job = current_job()
    with journal.execution(job.id, job.attempt, job.fence) as execution:
        _chaos_work(payload, job.attempt)
        return {"execution": execution, "attempt": job.attempt}


@job_handler("probe.chaos_snooze", max_attempts=5)
def chaos_snooze(payload):
    """For the chaos run: journal the execution, sleep, then snooze while the job's claim is
    among its first ``times`` (the fence counts claims, so it needs no write of its own),
    and complete after that."""
    job = current_job()
    with journal.execution(job.id, job.attempt, job.fence) as execution:
        _chaos_work(payload, job.attempt)
        if job.fence <= int(payload.get("times", 1)):
            raise Snooze(float(payload.get("seconds", 0.2)))
        return {"execution": execution, "attempt": job.attempt}


@job_handler("probe.chaos_poison", max_attempts=3)
def chaos_poison(payload):
    """For the chaos run: journal the execution, then end as ``payload["poison"]`` says
    (``system_exit``, ``os_exit`` or ``oom_kill``) on every attempt."""
    job = current_job()
    with journal.execution(job.id, job.attempt, job.fence):
        _end_badly(payload["poison"])


@job_handler("probe.cut_connection", max_attempts=2)
def cut_connection(payload):
    """Cuts its own database connection, as a PostgreSQL restart would: the worker cannot
    record this attempt's failure until it reconnects."""
    _started()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@task
def add(a, b):
    """A django.tasks task, run by the queue's backend."""
    return {"sum": a + b}


@task(takes_context=True, priority=10)
def whoami(context):
    """A task that reads its own result id from the context."""
    return {"id": context.task_result.id}


def _end_badly(how: str) -> None:
    """Every way a handler can end other than returning or raising an Exception."""
    if how == "system_exit":
        raise SystemExit(1)
    if how == "keyboard_interrupt":
        raise KeyboardInterrupt
    if how == "generator_exit":
        raise GeneratorExit
    if how == "os_exit":
        os._exit(3)
    if how == "segfault":
        import ctypes

        ctypes.string_at(0)
    if how == "oom_kill":
        os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does
    if how == "unstorable_message":
        # A file name decoded with surrogateescape, then a NUL: PostgreSQL's text takes neither.
        name = b"report-\xff.csv".decode("utf-8", "surrogateescape")
        raise ValueError(f"cannot read {name}\x00")
    if how == "close_connection":
        connection.close()
        raise RuntimeError("closed the database connection, then failed")
    raise ValueError(f"unknown way to end: {how}")


@job_handler("probe.poison", max_attempts=2, retry_backoff_base=0.1, retry_backoff_max=0.2)
def poison(payload):
    """Records the execution, then ends as ``payload["how"]`` says, on every attempt."""
    _started()
    _end_badly(payload["how"])


@job_handler("probe.backoff", max_attempts=5, retry_backoff_base=0.25, retry_backoff_max=0.5)
def backoff(payload):
    """Always raises; its short backoff reaches the cap by the third retry."""
    _started()
    raise RuntimeError("probe backoff failure")


class PickyError(ValueError):
    """A subclass of the error ``probe.picky`` gives up on."""


_PICKY_ERRORS = {"value": ValueError, "subclass": PickyError, "runtime": RuntimeError}


@job_handler(
    "probe.picky", max_attempts=3, retry_backoff_base=0.1, retry_backoff_max=0.1, give_up_on=(ValueError,)
)
def picky(payload):
    """Raises the error named by ``payload["raise"]``; gives up at once on ValueError."""
    _started()
    raise _PICKY_ERRORS[payload["raise"]](f"probe {payload['raise']} error")


@job_handler("probe.stubborn_retried", time_limit=1, max_attempts=2, retry_backoff_base=0.5)
def stubborn_retried(payload):
    """Like ``probe.stubborn``, with an attempt left after the first hard kill."""
    _started()
    while True:
        try:
            time.sleep(60)
        except Exception:  # noqa: BLE001, S110 - ignoring the limit is the point
            continue


@job_handler("probe.slot", atomic=True, max_attempts=5)
def slot(payload):
    """Record when it starts and ends (this process's clock), sleeping in between; atomic,
    so its completion commits the moment it ends and the job stops counting as running."""
    job = current_job()
    started = timezone.now()
    time.sleep(float(payload.get("sleep", 0)))
    finished = timezone.now()
    execution = Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())
    # started_at is auto_now_add: set the real start afterwards.
    Execution.objects.filter(pk=execution.pk).update(started_at=started, finished_at=finished)
    return {"pid": os.getpid()}


# --- slots: async and io-bound handlers (runworker --slots N) --------------------------


@job_handler("probe.async_wait", max_attempts=1)
async def async_wait(payload):
    """Wait on I/O in a coroutine; records its execution first."""
    from asgiref.sync import sync_to_async

    await sync_to_async(_started)()
    await asyncio.sleep(float(payload.get("sleep", 1)))
    return {"pid": os.getpid()}


@job_handler("probe.io_wait", io_bound=True, max_attempts=1)
def io_wait(payload):
    """Wait on I/O in a sync handler marked io-bound (a slot thread). The connection goes
    back to the pool before the wait, as the docs advise for slot threads."""
    _started()
    connection.close()
    time.sleep(float(payload.get("sleep", 1)))
    return {"pid": os.getpid()}


@job_handler("probe.io_checks_limit", io_bound=True, time_limit=1, max_attempts=1)
def io_checks_limit(payload):
    """A slot-thread handler that stops at its soft limit by checking for it."""
    _started()
    while True:
        check_time_limit()
        time.sleep(0.05)


@job_handler("probe.io_stubborn", io_bound=True, time_limit=1, max_attempts=1)
def io_stubborn(payload):
    """A slot-thread handler that never checks its limit: only the hard kill stops it."""
    _started()
    time.sleep(600)


@job_handler("probe.io_exit", io_bound=True, max_attempts=1)
def io_exit(payload):
    """A slot-thread handler that ends its whole process (a poison job beside others)."""
    _started()
    time.sleep(float(payload.get("sleep", 0)))
    os._exit(3)


@job_handler("probe.async_poison", max_attempts=2, retry_backoff_base=0.1, retry_backoff_max=0.2)
async def async_poison(payload):
    """A coroutine that ends as ``payload["how"]`` says, on every attempt, beside other slot jobs."""
    from asgiref.sync import sync_to_async

    await sync_to_async(_started)()
    how = payload["how"]
    if how == "system_exit":
        raise SystemExit(2)
    if how == "keyboard_interrupt":
        raise KeyboardInterrupt
    if how == "cancelled":
        # Awaits a task something else cancelled: CancelledError, though no one cancelled this job.
        waited = asyncio.ensure_future(asyncio.sleep(60))
        asyncio.get_running_loop().call_soon(waited.cancel)
        await waited
    raise ValueError(f"unknown way to end: {how}")


@job_handler("probe.leave_thread")
def leave_thread(payload):
    """Record the execution and return, leaving a non-daemon thread running (a library's
    background thread, say)."""
    import threading

    _started()
    threading.Thread(target=time.sleep, args=(3600,), name="left running").start()


def _steps(payload) -> None:
    """Work in short steps, each guarded by ``except Exception`` (log and go on, as much real
    code does), journaling the execution's start and end with the job's attempt and fence.
    ``cleanup`` seconds of work follow however the steps end (a stopped run tidies up)."""
    job = current_job()
    with journal.execution(job.id, job.attempt, job.fence):
        _started()
        try:
            for _ in range(int(payload.get("steps", 10))):
                try:
                    time.sleep(float(payload.get("step", 0.1)))
                    check_time_limit()  # where a slot thread meets its stop
                except Exception:  # noqa: BLE001, S112 - swallowing errors is the point
                    continue
        finally:
            time.sleep(float(payload.get("cleanup", 0)))


@job_handler("probe.steps", max_attempts=5)
def steps(payload):
    _steps(payload)


@job_handler("probe.steps_io", io_bound=True, max_attempts=5)
def steps_io(payload):
    _steps(payload)


@job_handler("probe.steps_async", max_attempts=5)
async def steps_async(payload):
    """The coroutine form: each step's errors swallowed, the cancel still ends it."""
    from asgiref.sync import sync_to_async

    job = current_job()
    execution = journal.started(job.id, job.attempt, job.fence)
    try:
        await sync_to_async(_started)()
        try:
            for _ in range(int(payload.get("steps", 10))):
                try:
                    await asyncio.sleep(float(payload.get("step", 0.1)))
                except Exception:  # noqa: BLE001, S112
                    continue
        finally:
            await asyncio.shield(asyncio.sleep(float(payload.get("cleanup", 0))))
    except BaseException as exc:
        journal.ended(execution, type(exc).__name__)
        raise
    journal.ended(execution, "returned")


@job_handler("probe.fail_io", io_bound=True, max_attempts=1)
def fail_io(payload):
    """Raises on a slot thread."""
    raise ValueError("slot failure")


@job_handler("probe.fail_async", max_attempts=1)
async def fail_async(payload):
    """Raises in a slot coroutine."""
    raise ValueError("coroutine failure")


# --- snooze, progress and log lines --------------------------------------------------------

# What the report handlers' calls returned, when the worker runs in the test's own process.
REPORTED: list[dict] = []


def _snooze_or_return(execution, payload):
    """Snooze while this job has run no more than ``times`` times, then return its run count."""
    runs = Execution.objects.filter(job_id=execution.job_id).count()
    if runs <= int(payload.get("times", 1)):
        raise Snooze(float(payload.get("seconds", 0.1)))
    return {"runs": runs, "attempt": execution.attempt}


@job_handler("probe.snooze", max_attempts=1)
def snooze(payload):
    """Snoozes ``times`` times (``seconds`` each), then completes. One attempt allowed: a
    snooze that charged one would leave none for the run that completes."""
    return _snooze_or_return(_started(), payload)


@job_handler("probe.snooze_io", io_bound=True, max_attempts=1)
def snooze_io(payload):
    """``probe.snooze`` on a slot thread."""
    return _snooze_or_return(_started(), payload)


@job_handler("probe.snooze_async", max_attempts=1)
async def snooze_async(payload):
    """``probe.snooze`` in a slot coroutine."""
    from asgiref.sync import sync_to_async

    execution = await sync_to_async(_started)()
    return await sync_to_async(_snooze_or_return)(execution, payload)


@job_handler("probe.snooze_atomic", atomic=True, max_attempts=1)
def snooze_atomic(payload):
    """Writes an Effect, then snoozes: the effect rolls back with the attempt."""
    job = current_job()
    Effect.objects.create(job_id=job.id, attempt=job.attempt)
    raise Snooze(float(payload.get("seconds", 60)))


@job_handler("probe.snooze_on_cancel", max_attempts=1)
def snooze_on_cancel(payload):
    """Waits to be cancelled and answers the cancel with a snooze: the two race."""
    _started()
    try:
        time.sleep(30)
    except CancelRequested:
        raise Snooze(0) from None


def _report(payload) -> dict:
    """``progress`` calls (i of N, message "step i") and ``lines`` log lines, as fast as it can."""
    job = current_job()
    started = time.monotonic()
    total = int(payload.get("progress", 0))
    progressed = {job.progress(step, total, message=f"step {step}") for step in range(1, total + 1)}
    logged = {job.log(f"line {index}", index=index) for index in range(int(payload.get("lines", 0)))}
    REPORTED.append({"job": job.id, "progress": progressed, "log": logged})
    return {"seconds": time.monotonic() - started}


@job_handler("probe.report", max_attempts=1)
def report(payload):
    return _report(payload)


@job_handler("probe.report_atomic", atomic=True, max_attempts=1)
def report_atomic(payload):
    """Reports inside its completion's transaction; fails when ``fail`` says so."""
    result = _report(payload)
    if payload.get("fail"):
        raise RuntimeError("failed after reporting")
    return result


@job_handler("probe.report_async", max_attempts=1)
async def report_async(payload):
    """Reports from a coroutine through ``aprogress`` and ``alog``."""
    job = current_job()
    assert await job.aprogress(0.25, message="a quarter")
    assert await job.alog("from a coroutine", where="slot")
    assert await job.aprogress(1, message="all")


@job_handler("probe.report_and_wait", max_attempts=1)
def report_and_wait(payload):
    """Reports half done and one log line, then waits for the file ``go`` names to appear."""
    job = current_job()
    _started()
    job.progress(1, 2, message="halfway")
    job.log("waiting for the go", file=payload["go"])
    while not os.path.exists(payload["go"]):
        time.sleep(0.05)
    job.progress(1, message="done")


@task
def snoozing_task(times):
    """A django.tasks task that snoozes ``times`` times (0.1 s each), then returns its run count."""
    job = current_job()
    runs = Execution.objects.filter(job_id=job.id).count() + 1
    Execution.objects.create(job_id=job.id, attempt=job.attempt, pid=os.getpid())
    if runs <= times:
        raise Snooze(0.1)
    return {"runs": runs, "attempt": job.attempt}


@task
def reporting_task(lines):
    """A django.tasks task that reports progress and log lines through current_job()."""
    job = current_job()
    job.progress(1, 4, message="a quarter")
    for index in range(lines):
        job.log(f"task line {index}", index=index)
    job.progress(1, message="done")
    return {"ok": True}


@task
async def reporting_task_async():
    """An async django.tasks task: current_job() and its a-methods work inside it too."""
    job = current_job()
    await job.aprogress(0.5, message="half")
    await job.alog("async task line")
    return {"id": job.id}
