"""Workflows and batches: jobs that wait for other jobs, enqueued as one graph.

A job with ``depends_on`` is inserted ``waiting``, with one ``queue_app_job_dependencies`` row
per dependency and a ``queue_app_job_waits`` row holding its failure policy. It is never in Redis
while it waits. The transaction that settles a job (its completion, its final failure,
its cancel) decides the job's waiting dependents in the same commit
(``queue_settle_dependents_v2`` in ``sql/schema/workflows_v2.sql``): released to
``queued`` with their outbox row, or cancelled with a reason naming the dependency.
Whatever crashes, a dependent is released at most once, and never left waiting once
every dependency has settled: there is no counter outside the rows it reads.

The building blocks (``chain``, ``group``, ``chord``, a mapping of named steps) all
compile to job requests with dependencies, enqueued by one ``enqueue_jobs`` call in
the caller's transaction: if it rolls back, no step exists and nothing reached Redis.
Batches, whose callbacks are jobs waiting on every member, are in batches.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import connection, transaction

from queue_app.conf import queue_settings
from queue_app.engine import sql
from queue_app.engine.actions import ActionCounts, cancel_jobs, retry_jobs
from queue_app.engine.enqueue import enqueue_checked, enqueue_jobs
from queue_app.engine.job_requests import CheckedRequest, JobRequest, check_requests
from queue_app.engine.transitions import apply_transition_to_jobs, settle_dependents
from queue_app.exceptions import InvalidWorkflow, JobsRejected, WorkflowNotFound
from queue_app.ids import parse_job_id
from queue_app.models import Job, JobDependency, JobWait, Workflow, WorkflowStep
from queue_app.states import TERMINAL, Status

ON_FAILURE_POLICIES = tuple(JobWait.OnFailure.values)


# --- Building blocks ---------------------------------------------------------------


@dataclass(frozen=True)
class Chain:
    """Run in order: each item waits for the previous one (all of a group's jobs)."""

    items: tuple


@dataclass(frozen=True)
class Group:
    """Run side by side; what follows waits for every item, and reads their results in this order."""

    items: tuple


@dataclass(frozen=True)
class Chord:
    """A group, then a callback that waits for all of it and reads its results, in group order."""

    header: Group
    body: Any


def chain(*items) -> Chain:
    """``a``, then ``b``, then ``c``: each a JobRequest, chain, group or chord."""
    if not items:
        raise InvalidWorkflow("a chain needs at least one item", field="steps")
    return Chain(tuple(items))


def group(*items) -> Group:
    """``group(a, b, c)`` or ``group([a, b, c])``."""
    if len(items) == 1 and not isinstance(items[0], (JobRequest, Chain, Group, Chord)):
        items = tuple(items[0])
    if not items:
        raise InvalidWorkflow("a group needs at least one item", field="steps")
    return Group(tuple(items))


def chord(header, callback) -> Chord:
    """``header`` (a group, or a list of items) side by side, then ``callback``."""
    return Chord(header if isinstance(header, Group) else group(header), callback)


def _compile(node, incoming: list[JobRequest], out: list[JobRequest]) -> list[JobRequest]:
    """Append ``node``'s job requests to ``out``, each first step waiting on ``incoming``;
    returns the requests what follows ``node`` waits on."""
    if isinstance(node, JobRequest):
        request = replace(node, depends_on=[*node.depends_on, *incoming])
        out.append(request)
        return [request]
    if isinstance(node, Chain):
        exits = incoming
        for item in node.items:
            exits = _compile(item, exits, out)
        return exits
    if isinstance(node, Group):
        return [exit for item in node.items for exit in _compile(item, incoming, out)]
    if isinstance(node, Chord):
        return _compile(Chain((node.header, node.body)), incoming, out)
    raise InvalidWorkflow(
        f"a workflow item must be a JobRequest, chain, group or chord, not {type(node).__name__}",
        field="steps",
    )


# --- Dependencies at enqueue -------------------------------------------------------


@dataclass
class _Graph:
    """One call's dependencies: per request, its parents in order, as ("new", index) for a
    request of the call or ("job", UUID) for an existing job."""

    parents: list[list[tuple[str, Any]]]
    existing: set[uuid.UUID]


def _resolve(requests: Sequence[JobRequest]) -> _Graph:
    """The call's graph, or JobsRejected naming each request at fault: an unknown policy, a
    dependency that names no job, a cycle, or more requests than WORKFLOW_MAX_STEPS.
    Reads nothing from the database."""
    limit = queue_settings().WORKFLOW_MAX_STEPS
    if len(requests) > limit:
        raise JobsRejected(
            [InvalidWorkflow(f"{len(requests)} jobs: at most {limit} (WORKFLOW_MAX_STEPS)", field="steps")],
            total=len(requests),
        )
    index_of = {id(request): index for index, request in enumerate(requests)}
    parents: list[list[tuple[str, Any]]] = []
    existing: set[uuid.UUID] = set()
    errors = []
    for index, request in enumerate(requests):
        mine: list[tuple[str, Any]] = []
        if request.on_failure not in ON_FAILURE_POLICIES:
            errors.append(
                InvalidWorkflow(f"must be one of {', '.join(ON_FAILURE_POLICIES)}", field="on_failure")
            )
            errors[-1].index = index
        depends_on = request.depends_on
        if isinstance(depends_on, (str, bytes, Mapping)) or not isinstance(depends_on, Iterable):
            error = InvalidWorkflow("must be a list of jobs, job ids or requests of this call")
            error.index = index
            errors.append(error)
            parents.append([])
            continue
        for item in depends_on:
            if isinstance(item, JobRequest):
                found = index_of.get(id(item))
                if found is None or found == index:
                    error = InvalidWorkflow(
                        "names a JobRequest that is not another job of this call"
                        if found is None
                        else "a job cannot depend on itself"
                    )
                    error.index = index
                    errors.append(error)
                    continue
                entry: tuple[str, Any] = ("new", found)
            else:
                job_id = parse_job_id(item.pk if isinstance(item, Job) else item)
                if job_id is None:
                    error = InvalidWorkflow(f"{str(item)[:100]!r} names no job")
                    error.index = index
                    errors.append(error)
                    continue
                entry = ("job", job_id)
                existing.add(job_id)
            if entry not in mine:
                mine.append(entry)
        parents.append(mine)
    if not errors:
        cycle = _cycle(parents)
        if cycle is not None:
            error = InvalidWorkflow(f"is part of a cycle: {' -> '.join(map(str, cycle))}")
            error.index = min(cycle)
            errors.append(error)
    if errors:
        raise JobsRejected(errors, total=len(requests))
    return _Graph(parents, existing)


def _cycle(parents: list[list[tuple[str, Any]]]) -> list[int] | None:
    """Indexes along a cycle among the call's own requests, or None (Kahn's algorithm, then a
    walk inside what is left)."""
    waiting_on = [sum(1 for kind, _ in mine if kind == "new") for mine in parents]
    children: list[list[int]] = [[] for _ in parents]
    for index, mine in enumerate(parents):
        for kind, parent in mine:
            if kind == "new":
                children[parent].append(index)
    ready = [index for index, count in enumerate(waiting_on) if count == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for child in children[node]:
            waiting_on[child] -= 1
            if waiting_on[child] == 0:
                ready.append(child)
    if done == len(parents):
        return None
    # Every node left has a parent left: walk up until a node repeats.
    node = next(index for index, count in enumerate(waiting_on) if count)
    seen: dict[int, int] = {}
    path: list[int] = []
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(p for kind, p in parents[node] if kind == "new" and waiting_on[p])
    loop = path[seen[node] :]
    return list(reversed(loop)) + [loop[-1]]


def _lock_existing(graph: _Graph, owner) -> None:
    """Lock the existing dependencies until the commit (``lock_dependencies``); JobsRejected
    for one that does not exist or is not the owner's (jobs without an owner depend on jobs
    without one)."""
    if not graph.existing:
        return
    with connection.cursor() as cursor:
        cursor.execute(sql.query("lock_dependencies"), {"ids": [str(i) for i in sorted(graph.existing)]})
        found = {row[0]: row[1] for row in cursor.fetchall()}
    owner_id = getattr(owner, "pk", None)
    errors = []
    for index, mine in enumerate(graph.parents):
        for kind, parent in mine:
            if kind != "job":
                continue
            if parent not in found:
                message = f"job {parent} does not exist"
            elif found[parent] != owner_id:
                message = f"job {parent} belongs to another owner"
            else:
                continue
            error = InvalidWorkflow(message)
            error.index = index
            errors.append(error)
    if errors:
        raise JobsRejected(errors, total=len(graph.parents))


def enqueue_with_dependencies(checked: list[CheckedRequest], *, owner) -> list[Job]:
    """``enqueue_jobs`` for a call in which some jobs have dependencies (see the module)."""
    requests = [item.request for item in checked]
    graph = _resolve(requests)
    with transaction.atomic():
        _lock_existing(graph, owner)
        jobs = enqueue_checked(checked, owner=owner)
        edges, waits = [], []
        for index, (job, mine) in enumerate(zip(jobs, graph.parents, strict=True)):
            if not mine or not job.was_created:
                continue  # a repeated key's job keeps the dependencies it was created with
            waits.append(JobWait(job_id=job.id, on_failure=requests[index].on_failure))
            for position, (kind, parent) in enumerate(mine):
                parent_id = jobs[parent].id if kind == "new" else parent
                edges.append(JobDependency(job_id=job.id, depends_on_id=parent_id, position=position))
        JobWait.objects.bulk_create(waits)
        JobDependency.objects.bulk_create(edges, batch_size=5000)
        # Decide the new jobs whose dependencies have already settled (the lock above
        # ordered this against their settle): a job of this call has not.
        created = {job.id for job in jobs if job.was_created}
        settled = {edge.depends_on_id for edge in edges if edge.depends_on_id not in created}
        moved = dict(settle_dependents(sorted(settled, key=str))) if settled else {}
        # A keyed job released at once may have parked behind its key's job in line.
        parked = {
            str(pk) for pk in Job.objects.filter(id__in=list(moved), parked=True).values_list("id", flat=True)
        }
    for job in jobs:
        if str(job.id) in moved:
            job.status = moved[str(job.id)]
            job.parked = str(job.id) in parked
    return jobs


def dependency_ids(job_id) -> list[str]:
    """The ids of the jobs ``job_id`` depends on, in their order."""
    rows = JobDependency.objects.filter(job_id=job_id).order_by("position", "id")
    return [str(pk) for pk in rows.values_list("depends_on_id", flat=True)]


def dependent_ids(job_id) -> list[str]:
    """The ids of the jobs that depend on ``job_id``."""
    rows = JobDependency.objects.filter(depends_on_id=job_id).order_by("id")
    return [str(pk) for pk in rows.values_list("job_id", flat=True)]


def parent_results(job_id) -> dict[str, Any]:
    """Each dependency's result, in order, under its step name (its job id outside a workflow)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("parent_results"), {"id": str(job_id)})
        rows = cursor.fetchall()
    return {
        name or str(pk): json.loads(result) if isinstance(result, str) else result
        for pk, name, _, result in rows
    }


# --- Workflows ----------------------------------------------------------------------


def _steps(graph) -> tuple[list[str], list[JobRequest]]:
    """(step names, requests) of a mapping of named steps or of a building block."""
    if isinstance(graph, Mapping):
        names = list(graph)
        for name in names:
            if not isinstance(name, str) or not 1 <= len(name) <= 200:
                raise InvalidWorkflow("step names are strings of 1 to 200 characters", field="steps")
            if not isinstance(graph[name], JobRequest):
                raise InvalidWorkflow("must be a JobRequest", step=name, field="steps")
        # Copies whose dependencies on other steps are those copies themselves (enqueue_jobs
        # matches the requests of one call by identity); any other name is a job id.
        steps = [replace(graph[name], depends_on=[]) for name in names]
        by_name = dict(zip(names, steps, strict=True))
        # A step may also be named by the JobRequest the mapping holds for it.
        by_request = {id(graph[name]): step for name, step in zip(names, steps, strict=True)}
        for name, step in zip(names, steps, strict=True):
            depends_on = graph[name].depends_on
            if isinstance(depends_on, str) or not isinstance(depends_on, Iterable):
                raise InvalidWorkflow("must be a list of step names or job ids", step=name)
            step.depends_on = [
                by_name.get(item, item) if isinstance(item, str) else by_request.get(id(item), item)
                for item in depends_on
            ]
        return names, steps
    out: list[JobRequest] = []
    _compile(graph, [], out)
    return [f"{index}.{request.type}" for index, request in enumerate(out)], out


def enqueue_workflow(graph, *, name: str = "", owner=None, on_failure: str | None = None) -> Workflow:
    """Enqueue a graph of jobs in one call: a mapping of step name -> JobRequest (whose
    ``depends_on`` names other steps, or existing jobs), or a building block (``chain``,
    ``group``, ``chord``). All or nothing, in the caller's transaction when there is one.

    ``on_failure`` sets every step's policy ("cancel" or "continue"); without it each step
    keeps its own. Returns the Workflow, with ``jobs``: step name -> Job. Raises JobsRejected
    whose errors carry ``step`` (the step's name) and ``index``; nothing is written then.
    """
    names, requests = _steps(graph)
    if on_failure is not None:
        for request in requests:  # copies made for this call: the caller's requests stay as they were
            request.on_failure = on_failure
    try:
        if len(set(names)) != len(names):
            raise InvalidWorkflow("step names must be unique", field="steps")
        _resolve(requests)  # before anything is written
        check_requests(requests)
        with transaction.atomic():
            workflow = Workflow.objects.create(name=str(name)[:200], owner=owner)
            jobs = enqueue_jobs(requests, owner=owner)
            WorkflowStep.objects.bulk_create(
                [
                    WorkflowStep(job_id=job.id, workflow=workflow, name=step, position=position)
                    for position, (step, job) in enumerate(zip(names, jobs, strict=True))
                    if job.was_created
                ],
                batch_size=5000,
            )
    except JobsRejected as rejected:
        for error in rejected.errors:
            if error.index is not None and getattr(error, "step", None) is None:
                error.step = names[error.index]
        raise
    workflow.jobs = dict(zip(names, jobs, strict=True))
    return workflow


def get_workflow(workflow_id) -> Workflow:
    parsed = parse_job_id(workflow_id)
    workflow = Workflow.objects.filter(id=parsed).first() if parsed is not None else None
    if workflow is None:
        raise WorkflowNotFound("no such workflow")
    return workflow


@dataclass(frozen=True)
class StepState:
    name: str
    job_id: str
    type: str
    status: str
    depends_on: list[str]  # step names (job ids for dependencies outside the workflow)


def workflow_steps(workflow: Workflow) -> list[StepState]:
    """Every step with its status and dependencies, in submission order."""
    steps = list(WorkflowStep.objects.filter(workflow=workflow).select_related("job").order_by("position"))
    name_of = {step.job_id: step.name for step in steps}
    deps: dict[uuid.UUID, list[str]] = {}
    for child, parent in (
        JobDependency.objects.filter(job_id__in=list(name_of))
        .order_by("position", "id")
        .values_list("job_id", "depends_on_id")
    ):
        deps.setdefault(child, []).append(name_of.get(parent, str(parent)))
    return [
        StepState(step.name, str(step.job_id), step.job.type, step.job.status, deps.get(step.job_id, []))
        for step in steps
    ]


def workflow_status(steps: Sequence[StepState]) -> str:
    """One word for the whole: running until every step is finished, then completed, or
    failed when a step failed, else cancelled."""
    statuses = {step.status for step in steps}
    if not statuses <= TERMINAL:
        return "running"
    if statuses <= {Status.COMPLETED}:
        return Status.COMPLETED
    return Status.FAILED if Status.FAILED in statuses else Status.CANCELLED


def cancel_workflow(workflow, *, reason: str = "workflow cancelled") -> ActionCounts:
    """Cancel every step not yet finished (a running one is asked to stop, as cancel_job does)."""
    ids = list(WorkflowStep.objects.filter(workflow=workflow).values_list("job_id", flat=True))
    return cancel_jobs(ids, reason=reason)


def retry_workflow(workflow, *, reason: str = "workflow retried") -> ActionCounts:
    """Take every failed or cancelled step up again: those whose dependencies all completed
    are queued (a retry), the others wait again for theirs. Completed steps keep their results."""
    steps = WorkflowStep.objects.filter(workflow=workflow, job__status__in=[Status.FAILED, Status.CANCELLED])
    ids = list(steps.values_list("job_id", flat=True))
    unfinished_deps = set(
        JobDependency.objects.filter(job_id__in=ids)
        .exclude(depends_on__status=Status.COMPLETED)
        .values_list("job_id", flat=True)
    )
    to_wait = [job_id for job_id in ids if job_id in unfinished_deps]
    to_queue = [job_id for job_id in ids if job_id not in unfinished_deps]
    with transaction.atomic():
        resumed = apply_transition_to_jobs("resume", to_wait, message=reason) if to_wait else []
        JobWait.objects.filter(job_id__in=[job.id for job in resumed]).update(blocked_by=None)
        counts = retry_jobs(to_queue, reason=reason) if to_queue else ActionCounts(0)
        # Decide the resumed steps again, as a settle would: one may wait on a dependency
        # outside the workflow that has already failed, which nothing else would settle again.
        parents = JobDependency.objects.filter(job_id__in=[job.id for job in resumed])
        parent_ids = sorted({str(pk) for pk in parents.values_list("depends_on_id", flat=True)})
        if parent_ids:
            settle_dependents(parent_ids)
    return ActionCounts(changed=counts.changed + len(resumed), max_attempts_raised=counts.max_attempts_raised)
