"""Workflows and batches in the chaos run: their shapes, and the client that enqueues them.

Every step is a submission of its own (a ``ref`` in its payload, a ``Spec``
with the statuses it may end in), so the run's other invariants cover steps
as they cover any job. The shapes, per 400 planned jobs:

- fan-out: one job, then a group of 50 (at low priority, as bulk work is), then one that
  waits for all 50;
- chains of 10: one that completes, one whose fifth step fails (the rest are
  cancelled by the "cancel" policy), one with ``on_failure="continue"`` (the
  rest run anyway);
- batches of 10 members with ``on_complete``, ``on_success`` and
  ``on_failure`` callbacks: one whose members all complete, one with a member
  that fails.

A workflow is enqueued in one transaction, so it exists whole or not at all.
After an error the client cannot know which (the commit may have happened),
so it looks for its first step's job once PostgreSQL answers, and enqueues
again only if there is none: every step's ``ref`` stays unique.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from chaoslib.clients import Spec, Submission

CHANNEL = "workflow"
FAN_OUT = 50
CHAIN_LENGTH = 10
BATCH_SIZE = 10
# A step meant to fail fails every attempt it has.
FAILING = {"fail_first": 100}


@dataclass
class WorkflowPlan:
    """One workflow or batch: its steps' specs, and how they hang together."""

    ref: str
    kind: str  # "fan_out", "chain", "chain_fails", "chain_continues", "batch", "batch_fails"
    at: float
    steps: list[Spec] = field(default_factory=list)


def _step(
    rng: random.Random,
    plan: WorkflowPlan,
    *,
    expected: str,
    fails: bool = False,
    long: bool = False,
    priority: str | None = None,
):
    ref = f"{plan.ref}s{len(plan.steps):03d}"
    # Mostly short, some long enough for a kill or a pause to catch one mid-run.
    sleep = rng.uniform(0.5, 1.2) if long or rng.random() < 0.05 else rng.uniform(0.0, 0.15)
    payload = {"ref": ref, "sleep": round(sleep, 3), **(FAILING if fails else {})}
    if sleep >= 0.5 and rng.random() < 0.5:
        # A target for the faults that pause or stop a worker mid-job (see clients.py): the
        # stale attempt of a step reaches its completion, which must release nothing twice.
        payload["stubborn"] = True
    plan.steps.append(
        Spec(
            ref=ref,
            channel=CHANNEL,
            at=plan.at,
            type=rng.choice(["probe.chaos", "probe.chaos_plain"]),
            payload=payload,
            priority=priority or rng.choice(["high", "medium", "low"]),
            queue="default",
            delay=None,
            max_attempts=rng.randint(2, 3) if fails else rng.randint(8, 12),
            key=None,
            expected=(expected,),
        )
    )


def plan_workflows(seed: int, jobs: int, *, window: float) -> list[WorkflowPlan]:
    """The workflows of a run, in time order; a pure function of the seed."""
    rng = random.Random(seed + 6)
    kinds = ["fan_out", "chain", "chain_fails", "chain_continues", "batch", "batch_fails"]
    plans = []
    for _ in range(max(1, round(jobs / 400))):
        for kind in kinds:
            # Early enough that the faults catch it running.
            plan = WorkflowPlan(f"w{len(plans):03d}", kind, round(rng.uniform(0.02, 0.6) * window, 3))
            if kind == "fan_out":
                _step(rng, plan, expected="completed", long=True)
                for _ in range(FAN_OUT):
                    _step(rng, plan, expected="completed", priority="low")
                _step(rng, plan, expected="completed")
            elif kind.startswith("chain"):
                fails_at = None if kind == "chain" else 4
                for index in range(CHAIN_LENGTH):
                    cancelled = kind == "chain_fails" and fails_at is not None and index > fails_at
                    expected = "failed" if index == fails_at else "cancelled" if cancelled else "completed"
                    _step(rng, plan, expected=expected, fails=index == fails_at, long=rng.random() < 0.3)
            else:
                failing = {rng.randrange(BATCH_SIZE)} if kind == "batch_fails" else set()
                for index in range(BATCH_SIZE):
                    fails = index in failing
                    _step(rng, plan, expected="failed" if fails else "completed", fails=fails)
                _step(rng, plan, expected="completed")  # on_complete
                _step(rng, plan, expected="cancelled" if failing else "completed")  # on_success
                _step(rng, plan, expected="completed" if failing else "cancelled")  # on_failure
            plans.append(plan)
    return sorted(plans, key=lambda plan: (plan.at, plan.ref))


def _request(spec: Spec):
    from queue_app.services import JobRequest

    return JobRequest(
        type=spec.type,
        payload=spec.payload,
        priority=spec.priority,
        queue=spec.queue,
        max_attempts=spec.max_attempts,
    )


def enqueue(plan: WorkflowPlan) -> list[str]:
    """Enqueue the plan in one transaction; the job id of each step, in step order."""
    from queue_app.services import chain, enqueue_batch, enqueue_workflow, group

    requests = [_request(spec) for spec in plan.steps]
    if plan.kind == "batch" or plan.kind == "batch_fails":
        batch = enqueue_batch(
            requests[:-3],
            on_complete=requests[-3],
            on_success=requests[-2],
            on_failure=requests[-1],
            name=plan.ref,
        )
        callbacks = [batch.on_complete_id, batch.on_success_id, batch.on_failure_id]
        return [str(job.id) for job in batch.jobs] + [str(job_id) for job_id in callbacks]
    if plan.kind == "fan_out":
        graph = chain(requests[0], group(*requests[1:-1]), requests[-1])
        workflow = enqueue_workflow(graph, name=plan.ref)
    else:
        on_failure = "continue" if plan.kind == "chain_continues" else None
        workflow = enqueue_workflow(chain(*requests), name=plan.ref, on_failure=on_failure)
    by_ref = {job.payload["ref"]: str(job.id) for job in workflow.jobs.values()}
    return [by_ref[spec.ref] for spec in plan.steps]


def _existing(plan: WorkflowPlan) -> list[str] | None:
    """The step ids of the plan's workflow if an earlier try committed it, else None."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT payload->>'ref', id::text FROM queue_app_jobs WHERE payload->>'ref' = ANY(%s)",
            [[spec.ref for spec in plan.steps]],
        )
        found = dict(cursor.fetchall())
    if not found:
        return None
    return [found[spec.ref] for spec in plan.steps]


class WorkflowClient(threading.Thread):
    """Enqueues each plan at its time through the service layer, until it is acknowledged."""

    def __init__(self, plans: list[WorkflowPlan], *, started: float, stop: threading.Event) -> None:
        super().__init__(name="workflow client", daemon=True)
        self.plans = plans
        self.submissions = {spec.ref: Submission(spec) for plan in plans for spec in plan.steps}
        self.started = started
        self.stop = stop

    def run(self) -> None:
        from django.db import connection

        try:
            for plan in self.plans:
                wait = self.started + plan.at - time.monotonic()
                if wait > 0 and self.stop.wait(wait):
                    return
                self._submit(plan)
        finally:
            connection.close()

    def _submit(self, plan: WorkflowPlan) -> None:
        from django.db import DatabaseError, InterfaceError, connection

        backoff, uncertain = 0.1, False
        while not self.stop.is_set():
            for spec in plan.steps:
                self.submissions[spec.ref].tries += 1
            try:
                ids = _existing(plan) if uncertain else None
                if ids is None:
                    uncertain = True
                    ids = enqueue(plan)
            except (DatabaseError, InterfaceError) as exc:
                connection.close()
                for spec in plan.steps:
                    self.submissions[spec.ref].error = f"{type(exc).__name__}: {exc}"[:300]
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            for spec, job_id in zip(plan.steps, ids, strict=True):
                record = self.submissions[spec.ref]
                record.acked_ids.append(job_id)
                record.outcome = "acked"
            return
