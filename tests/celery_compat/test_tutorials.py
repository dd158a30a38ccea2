"""Celery's own tutorials' task modules, unchanged but for their import, on real worker processes.

"First Steps with Celery" (tasks.py: add) and "Next Steps" (proj/tasks.py: add, mul, xsum,
sent with delay(), apply_async(queue=, countdown=), and its "Canvas: Designing Work-flows":
signatures, partials, groups, chains and chords), each call and check as the tutorial
makes it.
"""

import re
from datetime import timedelta
from importlib import import_module

import pytest

from queue_app.contrib.celery import chain, chord, group
from queue_app.contrib.celery.result import GroupResult
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


def test_next_steps_signatures_and_partials():
    """ "Canvas: Designing Work-flows", its signatures: ``add.signature((2, 2), countdown=10)``
    (a shorter countdown), ``add.s(2, 2)``, ``s1.delay()``, the partial ``s2 = add.s(2)``
    resolved by ``s2.delay(8)`` to add(8, 2), and an immutable ``add.si``."""
    from proj.tasks import add

    sig = add.signature((2, 2), countdown=1)
    assert repr(sig) == "proj.tasks.add(2, 2)" and repr(add.s(2, 2)) == "proj.tasks.add(2, 2)"
    s1 = add.s(2, 2)
    res = s1.delay()
    assert res.get(timeout=TIMEOUT) == 4
    s2 = add.s(2)
    res = s2.delay(8)
    assert res.get(timeout=TIMEOUT) == 10
    assert Job.objects.get(id=res.id).payload["args"] == [8, 2]
    assert sig.delay().get(timeout=TIMEOUT) == 4
    assert add.si(3, 3).apply_async(args=(100,)).get(timeout=TIMEOUT) == 6  # immutable


def test_next_steps_groups():
    """``group(add.s(i, i) for i in range(10))().get()`` and the partial group
    ``g = group(add.s(i) for i in range(10)); g(10).get()``."""
    from proj.tasks import add

    assert group(add.s(i, i) for i in range(10))().get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    g = group(add.s(i) for i in range(10))
    assert g(10).get(timeout=TIMEOUT) == [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]


def test_next_steps_chains():
    """``chain(add.s(4, 4) | mul.s(8))().get()`` is (4 + 4) * 8; the partial chain
    ``g = chain(add.s(4) | mul.s(8)); g(4).get()``; and ``(add.s(4, 4) | mul.s(8))().get()``."""
    from proj.tasks import add, mul

    # (4 + 4) * 8
    res = chain(add.s(4, 4) | mul.s(8))()
    assert res.get(timeout=TIMEOUT) == 64
    # mul.s(8) got add's result first: mul(8, 8), as Celery's partials take it.
    assert Job.objects.get(id=res.id).payload["args"] == [8]
    assert res.parent.get(timeout=TIMEOUT) == 8
    # (? + 4) * 8
    g = chain(add.s(4) | mul.s(8))
    assert g(4).get(timeout=TIMEOUT) == 64
    assert (add.s(4, 4) | mul.s(8))().get(timeout=TIMEOUT) == 64


def test_next_steps_chords():
    """``chord((add.s(i, i) for i in range(10)), xsum.s())().get()`` is 90, and so is a group
    chained to a task, ``(group(add.s(i, i) for i in range(10)) | xsum.s())().get()``."""
    from proj.tasks import add, xsum

    res = chord((add.s(i, i) for i in range(10)), xsum.s())()
    assert res.get(timeout=TIMEOUT) == 90
    assert (group(add.s(i, i) for i in range(10)) | xsum.s())().get(timeout=TIMEOUT) == 90
    # The header's results reached the callback as one list, in group order.
    header = res.parent
    assert isinstance(header, GroupResult) and header.get(timeout=TIMEOUT) == [i + i for i in range(10)]


def test_what_the_queue_cannot_map_is_refused_with_its_shape_named():
    from proj.tasks import add, mul

    for combine, message in (
        (lambda: add.chunks(zip(range(100), range(100), strict=True), 10), "chunks()"),
        (lambda: add.map([1, 2]), "map()"),
        (lambda: add.s(1).link(mul.s(2)), "link()"),
        (lambda: (add.s(1, 1) | mul.s(2)).on_error(add.s(0)), "link_error()"),
        (lambda: add.s(1, 1).freeze(), "freeze()"),
        (lambda: chain(add.s(1, 1), mul.s(2).set(countdown=5)).delay(), "countdown= on proj.tasks.mul(2)"),
        (lambda: chain(add.s(1, 1), add).delay(), "must be a signature: add.s"),
    ):
        with pytest.raises((NotImplementedError, TypeError), match=re.escape(message)):
            combine()
    assert not Job.objects.filter(type__startswith="proj.tasks.").exists()
