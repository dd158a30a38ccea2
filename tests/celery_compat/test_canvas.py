"""Celery's canvas integration cases (t/integration/test_canvas.py in Celery's repository),
ported: each test names the case it follows. They run on the package's real worker and
relay, against PostgreSQL and Redis.

What differs from Celery, on purpose: a failed task cancels what is chained after it (the
workflow's default failure policy), so a chord's callback is never run after a failed
header task, and reads REVOKED; its ``get()`` raises the header task's error, as Celery's
does.
"""

from datetime import timedelta

import pytest

from queue_app.contrib.celery import chain, chord, group
from queue_app.contrib.celery.result import AsyncResult, GroupResult
from queue_app.models import Job, JobLog
from tests.celery_compat.canvas_tasks import ExpectedException, add, add_to_all, fail, identity, tsum

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.redis,
    pytest.mark.usefixtures("celery_workers"),
]

TIMEOUT = 60


def jobs_of(task) -> int:
    return Job.objects.filter(type=task.name).count()


def test_simple_chain():
    """test_chain.test_simple_chain: each task gets the one before's result first."""
    c = add.s(4, 4) | add.s(8) | add.s(16)
    assert c().get(timeout=TIMEOUT) == 32


def test_single_chain():
    """test_chain.test_single_chain."""
    c = chain(add.s(3, 4))()
    assert c.get(timeout=TIMEOUT) == 7


def test_chain_inside_group_receives_arguments():
    """test_chain.test_chain_inside_group_receives_arguments: a chain inside a group takes
    the result of the task before the group."""
    c = add.s(5, 6) | group((add.s(1) | add.s(2), add.s(3)))
    res = c()
    assert isinstance(res, GroupResult)
    assert res.get(timeout=TIMEOUT) == [14, 14]


def test_chain_on_error():
    """test_chain.test_chain_on_error: the failed task's error comes back from the chain's
    result and from its parent's; the task after it never runs."""
    c1 = chain(add.s(1, 2), fail.s(), add.s(3, 4))
    res = c1()
    with pytest.raises(ExpectedException):
        res.get(timeout=TIMEOUT, propagate=True)
    with pytest.raises(ExpectedException):
        res.parent.get(timeout=TIMEOUT, propagate=True)
    assert res.state == "REVOKED" and res.parent.state == "FAILURE"
    assert res.parent.parent.get(timeout=TIMEOUT) == 3
    assert not JobLog.objects.filter(job_id=res.id, event="claimed").exists()


def test_nested_chain_group_mid_and_last():
    """test_chain.test_nested_chain_group_mid and test_nested_chain_group_last."""
    mid = chain(identity.s(42), group(identity.s(), identity.s()), identity.s())
    assert mid.delay().get(timeout=TIMEOUT) == [42, 42]
    last = chain(identity.s(42), group(identity.s(), identity.s()))
    assert last.delay().get(timeout=TIMEOUT) == [42, 42]


def test_group_results_come_back_in_group_order():
    """test_group.test_group_lone and test_group.test_nested_group (groups in a group are
    unrolled): results in the group's order, whatever order the tasks finished in."""
    res = group(identity.s(i) for i in range(20)).delay()
    assert res.get(timeout=TIMEOUT) == list(range(20))
    nested = group(add.si(1, 10), group(add.si(1, 100), group(add.si(1, 1000), add.si(1, 2000))))
    assert nested().get(timeout=TIMEOUT) == [11, 101, 1001, 2001]


def test_group_result_of_a_chain_ending_in_a_group():
    """test_chain.test_group_result_not_has_cache: a chain ending in a group is one member,
    whose result is that group's list."""
    t1 = identity.si(1)
    t2 = identity.si(2)
    gt = group([identity.si(3), identity.si(4)])
    ct = chain(identity.si(5), gt)
    task = group(t1, t2, ct)
    result = task.delay()
    assert result.get(timeout=TIMEOUT) == [1, 2, [3, 4]]


def test_chord_callback_gets_every_header_result():
    """test_chord.test_simple_chord_with_a_delay_in_group_save's chord, and
    test_chord.test_single_task_header: the body gets the header's results, once."""
    c = chord(header=[add.si(1, 1), add.si(1, 1)], body=tsum.s())
    result = c()
    assert result.get(timeout=TIMEOUT) == 4
    c1 = chord([add.s(2, 5)], body=add_to_all.s(9))
    assert c1().get(timeout=TIMEOUT) == [16]
    c2 = group([add.s(2, 5)]) | add_to_all.s(9)
    assert c2().get(timeout=TIMEOUT) == [16]
    # Each body ran exactly once: one job each, one attempt.
    assert list(Job.objects.filter(type=tsum.name).values_list("attempts", flat=True)) == [1]


def test_group_chain_to_chord():
    """test_chord.test_group_chain: a task, a group taking its result, and a callback
    taking the group's."""
    c = add.s(2, 2) | group(add.s(i) for i in range(4)) | add_to_all.s(8)
    res = c()
    assert res.get(timeout=TIMEOUT) == [12, 13, 14, 15]


def test_chord_header_with_chains_and_nested_chords():
    """test_chord.test_nested_chord (c1 and c2) and test_chord.test_chain_chord_chain_chord:
    chains and chords inside a chord's header give their last task's result."""
    c1 = chord(
        [chord([add.s(1, 2), add.s(3, 4)], add.s([5])), chord([add.s(6, 7)], add.s([10]))],
        add_to_all.s(["A"]),
    )
    assert c1().get(timeout=TIMEOUT) == [[3, 7, 5, "A"], [13, 10, "A"]]
    c2 = group(
        [group([add.s(1, 2), add.s(3, 4)]) | add.s([5]), group([add.s(6, 7)]) | add.s([10])]
    ) | add_to_all.s(["A"])
    assert c2().get(timeout=TIMEOUT) == [[3, 7, 5, "A"], [13, 10, "A"]]
    c = chain(
        identity.si(1),
        chord(
            [identity.si(2), chain(identity.si(3), chord([identity.si(4), identity.si(5)], identity.si(6)))],
            identity.si(7),
        ),
    )
    assert c.delay().get(timeout=TIMEOUT) == 7


def test_chain_of_chords():
    """test_chain.test_chain_of_chords_with_two_tasks and
    test_chain.test_chain_of_a_chord_and_three_tasks_and_a_group."""
    c = add.si(1, 0)
    c = c | group(add.s(1), add.s(1))
    c = c | tsum.s()
    c = c | add.s(1)
    c = c | chord(group(add.s(1), add.s(1)), tsum.s())
    assert c().get(timeout=TIMEOUT) == 12
    c = group(add.s(1, 1), add.s(1, 1))
    c = c | tsum.s()
    c = c | add.s(1)
    c = c | add.s(1)
    c = c | add.s(1)
    c = c | group(add.s(1), add.s(1))
    assert c().get(timeout=TIMEOUT) == [8, 8]


def test_nested_chord_group_chain_group_tail():
    """test_chord.test_nested_chord_group_chain_group_tail: a chain ending in a group inside a
    chord's header gives the body a list holding that group's list."""
    sig = chord(group(chain(identity.s(42), group(identity.s(), identity.s()))), identity.s())
    assert sig.delay().get(timeout=TIMEOUT) == [[42, 42]]


def test_chord_on_error():
    """test_chord.test_chord_on_error: a header task fails, the chord's ``get()`` raises its
    error. Here the body is cancelled, never run, and the other header tasks' results stay."""
    c1 = chord(header=[add.s(1, 2), add.s(3, 4), fail.s()], body=identity.s())
    res = c1()
    with pytest.raises(ExpectedException):
        res.get(timeout=TIMEOUT, propagate=True)
    assert res.state == "REVOKED"
    body = Job.objects.get(id=res.id)
    assert body.status == "cancelled" and body.attempts == 0
    assert not JobLog.objects.filter(job_id=res.id, event="claimed").exists()
    header = res.parent
    assert [member.state for member in header] == ["SUCCESS", "SUCCESS", "FAILURE"]
    assert header.get(timeout=TIMEOUT, propagate=False)[:2] == [3, 7]
    with pytest.raises(ExpectedException):
        header.get(timeout=TIMEOUT)


def test_parallel_chords():
    """test_chord.test_parallel_chords: two chords in a group."""
    c1 = chord(group(add.s(1, 2), add.s(3, 4)), tsum.s())
    c2 = chord(group(add.s(1, 2), add.s(3, 4)), tsum.s())
    g = group(c1, c2)
    r = g.delay()
    assert r.get(timeout=TIMEOUT) == [10, 10]


def test_empty_header_chord():
    """test_chord.test_empty_header_chord: the body gets an empty list."""
    c1 = chord([], body=add_to_all.s(9))
    assert c1().get(timeout=TIMEOUT) == []
    c2 = group([]) | add_to_all.s(9)
    assert c2().get(timeout=TIMEOUT) == []


def test_large_header():
    """test_chord.test_large_header, with 200 tasks: the body gets every result."""
    c = group(identity.si(i) for i in range(200)) | tsum.s()
    assert c.delay().get(timeout=TIMEOUT * 3) == sum(range(200))


def test_a_canvas_is_one_workflow_and_its_options_reach_its_steps():
    """Options Celery gives at apply_async reach every step (queue), or the first (countdown)."""
    res = (add.s(1, 1) | add.s(1)).apply_async(queue="lopri", countdown=1)
    assert isinstance(res, AsyncResult) and res.get(timeout=TIMEOUT) == 3
    first, second = Job.objects.get(id=res.parent.id), Job.objects.get(id=res.id)
    assert first.queue == second.queue == "lopri"
    claimed = JobLog.objects.get(job_id=first.id, event="claimed").created_at
    assert claimed >= first.created_at + timedelta(seconds=1)
    assert first.workflow_step.workflow_id == second.workflow_step.workflow_id
