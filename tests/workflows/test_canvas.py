"""Chains, groups and chords, ported from Celery's canvas integration tests
(celery/celery, ``t/integration/test_canvas.py``), run through the real claim, executor and
completion against PostgreSQL (``run_jobs``).

Celery passes a step's result as the next task's first argument; here a step reads its
parents' results (``current_job().parent_results()``). ``wf.add`` returns its ``value``
plus the sum of its parents' results, which is what Celery's ``add.s(n)`` computes in a
chain and its ``tsum`` after a group; ``wf.collect`` returns the parents' results as a list.
Each test names the Celery test it comes from.
"""

import pytest
from django.db import transaction

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.engine import execution
from queue_app.models import Job, OutboxMessage, Workflow
from queue_app.services import (
    JobRequest,
    cancel_workflow,
    chain,
    chord,
    enqueue_job,
    enqueue_workflow,
    group,
    retry_workflow,
)
from queue_app.states import Status
from queue_app.testing import run_jobs
from tests.helpers import claim_jobs

pytestmark = pytest.mark.django_db


def add(value=0) -> JobRequest:
    return JobRequest("wf.add", {"value": value})


def tsum() -> JobRequest:
    return JobRequest("wf.add", {"value": 0})


def results(workflow, names) -> list:
    return [Job.objects.get(id=workflow.jobs[name].id).result for name in names]


def last_steps(workflow, count) -> list[str]:
    return list(workflow.jobs)[-count:]


def test_simple_chain():
    """test_chain.test_simple_chain: add.s(4, 4) | add.s(8) | add.s(16) == 32."""
    workflow = enqueue_workflow(chain(add(8), add(8), add(16)))
    run_jobs()
    assert results(workflow, last_steps(workflow, 1)) == [32]


def test_single_chain():
    """test_chain.test_single_chain: chain(add.s(3, 4)) == 7."""
    workflow = enqueue_workflow(chain(add(7)))
    run_jobs()
    assert results(workflow, last_steps(workflow, 1)) == [7]


def test_group_results_in_chain():
    """test_chain.test_group_results_in_chain: group(add.s(1, 2) | group(add.s(1), add.s(2))) == [4, 5]."""
    workflow = enqueue_workflow(group(chain(add(3), group(add(1), add(2)))))
    run_jobs()
    assert results(workflow, last_steps(workflow, 2)) == [4, 5]


def test_chain_inside_group_receives_arguments():
    """test_chain.test_chain_inside_group_receives_arguments:
    add.s(5, 6) | group((add.s(1) | add.s(2), add.s(3))) == [14, 14]."""
    workflow = enqueue_workflow(chain(add(11), group(chain(add(1), add(2)), add(3))))
    names = list(workflow.jobs)
    run_jobs()
    # The group's ends: the chain's last step, then add(3).
    assert results(workflow, [names[2], names[3]]) == [14, 14]


def test_chain_of_task_a_group_and_a_chord():
    """test_chain.test_chain_of_task_a_group_and_a_chord:
    add.si(1, 0) | group(add.s(1), add.s(1)) | group(tsum.s(), tsum.s()) | tsum.s() == 8."""
    workflow = enqueue_workflow(chain(add(1), group(add(1), add(1)), group(tsum(), tsum()), tsum()))
    run_jobs()
    assert results(workflow, last_steps(workflow, 1)) == [8]


def test_chain_of_chords_with_two_tasks():
    """test_chain.test_chain_of_chords_with_two_tasks: add.si(1, 0) | group(add.s(1), add.s(1))
    | tsum.s() | add.s(1) | chord(group(add.s(1), add.s(1)), tsum.s()) == 12."""
    workflow = enqueue_workflow(
        chain(add(1), group(add(1), add(1)), tsum(), add(1), chord(group(add(1), add(1)), tsum()))
    )
    run_jobs()
    assert results(workflow, last_steps(workflow, 1)) == [12]


def test_nested_chains_run_in_order():
    """test_chain.test_complex_chain (its nested chain, without task replacement):
    add.s(2, 2) | (add.s(4) | add.s(8) | add.s(16) | add.s(32)) | group(add.s(i) for i in range(4))
    == [64, 65, 66, 67]."""
    workflow = enqueue_workflow(
        chain(add(4), chain(add(4), add(8), add(16), add(32)), group(*(add(i) for i in range(4))))
    )
    run_jobs()
    assert results(workflow, last_steps(workflow, 4)) == [64, 65, 66, 67]


def test_chord_callback_gets_every_result_in_group_order_whatever_order_they_finish():
    """The chord contract the Celery tests rely on (``tsum`` in t/integration/tasks.py gets the
    header's results as one list, in header order): here the header finishes in reverse order."""
    workflow = enqueue_workflow(chord([add(i) for i in range(10)], JobRequest("wf.collect")))
    names = list(workflow.jobs)
    for name in reversed(names[:10]):
        job = workflow.jobs[name]
        (claimed,) = claim_jobs([str(job.id)], worker_id="w")
        execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, job.payload["value"])])
    assert run_jobs().completed == 1
    callback = Job.objects.get(id=workflow.jobs[names[-1]].id)
    assert callback.result == {"results": list(range(10)), "names": names[:10]}


def test_chain_on_error():
    """test_chain.test_chain_on_error: chain(add.s(1, 2), fail.s(), add.s(3, 4)): the step
    after the failure never runs. Here it is cancelled, its error naming the failed step."""
    workflow = enqueue_workflow(chain(add(3), JobRequest("wf.fail"), add(7)))
    first, failing, after = workflow.jobs.values()
    summary = run_jobs()
    assert (summary.completed, summary.failed) == (1, 1)
    after = Job.objects.get(id=after.id)
    assert after.status == Status.CANCELLED
    assert str(failing.id) in after.last_error and after.started_at is None


def test_chord_on_error():
    """test_chord.test_chord_on_error: chord(header=[add.s(1, 2), add.s(3, 4), fail.s()], body):
    the body is not called; the header's other results stay readable."""
    workflow = enqueue_workflow(chord([add(3), add(7), JobRequest("wf.fail")], JobRequest("wf.collect")))
    names = list(workflow.jobs)
    run_jobs()
    assert results(workflow, names[:2]) == [3, 7]
    assert Job.objects.get(id=workflow.jobs[names[2]].id).status == Status.FAILED
    body = Job.objects.get(id=workflow.jobs[names[3]].id)
    assert (body.status, body.attempts) == (Status.CANCELLED, 0)
    assert str(workflow.jobs[names[2]].id) in body.last_error


def test_chord_with_on_failure_continue_runs_the_callback_with_what_completed():
    """Oban Pro's workflows (``ignore_cancelled``/``ignore_discarded``): a step may run after a
    failed dependency; its parent results show the failed one as None."""
    callback = JobRequest("wf.collect", on_failure="continue")
    workflow = enqueue_workflow(chord([add(3), JobRequest("wf.fail")], callback))
    run_jobs()
    body = Job.objects.get(id=list(workflow.jobs.values())[-1].id)
    assert body.status == Status.COMPLETED
    assert body.result["results"] == [3, None]


def test_a_dag_of_named_steps_names_each_parent():
    """Oban Pro's ``Workflow.add(name, job, deps: [...])``: named steps, and a step reads each
    parent's result under its name."""
    workflow = enqueue_workflow(
        {
            "fetch": add(1),
            "resize": JobRequest("wf.add", {"value": 10}, depends_on=["fetch"]),
            "thumb": JobRequest("wf.add", {"value": 20}, depends_on=["fetch"]),
            "publish": JobRequest("wf.collect", depends_on=["thumb", "resize"]),
        },
        name="images",
    )
    run_jobs()
    publish = Job.objects.get(id=workflow.jobs["publish"].id)
    assert publish.result == {"results": [21, 11], "names": ["thumb", "resize"]}


def test_a_workflow_in_a_rolled_back_transaction_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_workflow(chain(add(1), add(2)))
        raise RuntimeError("the caller fails")
    assert not Workflow.objects.exists()
    assert not Job.objects.exists()
    assert not OutboxMessage.objects.exists()


def test_cancelling_a_workflow_cancels_every_unfinished_step_and_retry_takes_it_up_again():
    workflow = enqueue_workflow(chain(add(1), add(2), add(3)))
    first, second, third = workflow.jobs.values()
    (claimed,) = claim_jobs([str(first.id)], worker_id="w")
    execution.complete_jobs([execution.Completion(claimed.id, claimed.fence, 1)])

    assert cancel_workflow(workflow).changed == 2
    statuses = [Job.objects.get(id=job.id).status for job in (first, second, third)]
    assert statuses == [Status.COMPLETED, Status.CANCELLED, Status.CANCELLED]

    assert retry_workflow(workflow).changed == 2
    statuses = [Job.objects.get(id=job.id).status for job in (first, second, third)]
    assert statuses == [Status.COMPLETED, Status.QUEUED, Status.WAITING]
    run_jobs()
    assert Job.objects.get(id=third.id).result == 6


def test_retrying_a_workflow_whose_step_waits_on_a_failed_outside_job_cancels_that_step_again():
    outside = enqueue_job("wf.fail")
    run_jobs()
    assert Job.objects.get(id=outside.id).status == Status.FAILED
    workflow = enqueue_workflow({"after": JobRequest("wf.add", depends_on=[str(outside.id)])})
    after = workflow.jobs["after"]
    assert Job.objects.get(id=after.id).status == Status.CANCELLED  # decided at enqueue
    retry_workflow(workflow)
    # Not left waiting for a settle that already happened: cancelled again, naming the job.
    after = Job.objects.get(id=after.id)
    assert after.status == Status.CANCELLED and str(outside.id) in after.last_error


def test_a_mapping_step_may_name_its_dependency_by_request():
    first = add(1)
    workflow = enqueue_workflow(
        {"first": first, "second": JobRequest("wf.add", {"value": 2}, depends_on=[first])}
    )
    run_jobs()
    assert results(workflow, ["second"]) == [3]
