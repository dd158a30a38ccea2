"""Celery's own tutorials' task modules, unchanged but for their import, on real worker processes.

"First Steps with Celery" (tasks.py: add) and "Next Steps" (proj/tasks.py: add, mul, xsum,
sent with delay(), apply_async(queue=, countdown=), and signatures), each call and
check as the tutorial makes it.
"""

from datetime import timedelta
from importlib import import_module

import pytest

from queue_app.contrib.celery import chain, chord, group
from queue_app.models import Job, JobLog

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.redis,
    pytest.mark.usefixtures("celery_workers"),
]

TIMEOUT = 60


def test_first_steps_add_runs_on_a_worker_and_its_result_comes_back():
    tasks = import_module("tasks")
    result = tasks.add.delay(4, 4)
    assert result.get(timeout=TIMEOUT) == 8
    assert result.ready() and result.successful() and result.status == "SUCCESS"
    job = Job.objects.get(id=result.id)
    assert (job.type, job.payload, job.result) == ("tasks.add", {"args": [4, 4], "kwargs": {}}, 8)
    # Called directly, it runs here and now.
    assert tasks.add(2, 2) == 4


def test_next_steps_tasks_run_on_a_worker():
    from proj.tasks import add, mul, xsum

    results = [add.delay(2, 2), mul.delay(4, 4), xsum.delay([1, 2, 3]), add.apply_async((2, 2))]
    assert [result.get(timeout=TIMEOUT) for result in results] == [4, 16, 6, 4]
    assert Job.objects.get(id=results[1].id).type == "proj.tasks.mul"


def test_next_steps_routing_and_countdown():
    """``add.apply_async((2, 2), queue='lopri', countdown=10)``, with a shorter countdown."""
    from proj.tasks import add

    result = add.apply_async((2, 2), queue="lopri", countdown=2)
    job = Job.objects.get(id=result.id)
    assert job.queue == "lopri" and job.next_retry_at is not None
    assert result.state == "PENDING" and not result.ready()
    assert result.get(timeout=TIMEOUT) == 4
    claimed = JobLog.objects.get(job_id=job.id, event="claimed").created_at
    assert claimed >= job.created_at + timedelta(seconds=2)


def test_next_steps_a_failing_task_reads_as_celerys_does():
    """``res = add.delay(2, '2')``: ``res.get()`` raises the TypeError, ``res.failed()``,
    ``res.state == 'FAILURE'``, ``res.get(propagate=False)`` returns it, ``res.traceback``."""
    from proj.tasks import add

    res = add.delay(2, "2")
    with pytest.raises(TypeError, match="unsupported operand"):
        res.get(timeout=TIMEOUT)
    assert res.failed() and res.state == "FAILURE" and res.ready()
    error = res.get(propagate=False)
    assert isinstance(error, TypeError) and "unsupported operand" in str(error)
    assert isinstance(res.result, TypeError)
    assert "Traceback" in res.traceback and "TypeError" in res.traceback
    # No autoretry_for: Celery runs it once, and so does the queue.
    assert Job.objects.get(id=res.id).attempts == 1


def test_next_steps_signatures_are_sent_and_the_canvas_says_it_is_not_here_yet():
    from proj.tasks import add, mul, xsum

    assert add.s(2, 2).delay().get(timeout=TIMEOUT) == 4
    partial = add.s(2)
    assert partial.delay(4).get(timeout=TIMEOUT) == 6
    assert add.si(3, 3).apply_async(args=(100,)).get(timeout=TIMEOUT) == 6  # immutable
    for combine in (
        lambda: chain(add.s(4, 4), mul.s(8)),
        lambda: add.s(4, 4) | mul.s(8),
        lambda: group(add.s(i, i) for i in range(10)),
        lambda: chord((add.s(i, i) for i in range(10)), xsum.s()),
        lambda: add.chunks(zip(range(100), range(100), strict=True), 10),
    ):
        with pytest.raises(NotImplementedError, match="workflows"):
            combine()
