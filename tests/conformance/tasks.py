"""Tasks for the django.tasks conformance tests, after Django's ``tests/tasks/tasks.py``."""

import asyncio
import os
import time

from django.tasks import TaskContext, task


@task()
def noop_task(*args, **kwargs) -> None:
    return None


@task()
async def noop_task_async(*args, **kwargs) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
async def calculate_meaning_of_life_async() -> int:
    await asyncio.sleep(0.01)
    return 42


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value():
    # A set is not JSON: the attempt fails with TypeError("Unsupported type ...").
    return {1, 2}


@task()
def returns_nan() -> float:
    # normalize_json passes these four; the job's result (PostgreSQL jsonb) cannot hold them.
    return float("nan")


@task()
def returns_nul() -> str:
    return "a\x00b"


@task()
def returns_big_int() -> int:
    return 2**64


@task()
def returns_int_keys() -> dict:
    return {1: "a"}


@task(max_attempts=2)
def returns_nan_with_retries() -> float:
    return float("nan")


@task(takes_context=True)
def get_task_id(context) -> str:
    return context.task_result.id


@task(takes_context=True)
def check_context(context, attempt) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


@task(takes_context=True, max_attempts=2)
def fails_on_first_attempt(context) -> int:
    """Succeeds on its second attempt, returning the attempt number it saw."""
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    return context.attempt


@task(max_attempts=2)
def always_fails() -> None:
    raise ValueError("every attempt fails")


@task()
def record_run(label: str) -> None:
    """Appends ``label`` to a Redis list: the order tasks really ran in, across processes."""
    from queue_app.broker import get_client

    get_client().rpush("conformance:ran", label)


@task()
def exiting_task() -> None:
    raise SystemExit(3)


@task()
def interrupting_task() -> None:
    raise KeyboardInterrupt


@task()
def calling_exit_task() -> None:
    exit(1)


@task()
def sleeping_task(seconds: float, marker: str = "") -> None:
    """Sleeps; creates ``marker`` first, so a test can tell it started (not only was claimed)."""
    if marker:
        open(marker, "w").close()
    time.sleep(seconds)


@task(takes_context=True, max_attempts=3)
def fails_then_hangs_once(context, marker: str) -> list[str]:
    """Attempt 1 fails; attempt 2 hangs the first time (to be handed back), then returns
    the worker ids its context saw."""
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(60)
    return context.task_result.worker_ids


@task()
def ignores_its_time_limit() -> None:
    """Swallows the soft limit's exception: the supervisor kills its process at the hard limit."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            time.sleep(0.1)
        except Exception:  # noqa: BLE001, S112 - the point of this task
            continue


@task()
def kills_its_process() -> None:
    os._exit(3)
