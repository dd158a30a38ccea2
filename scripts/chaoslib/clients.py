"""The clients: submit jobs through the service layer and the API, and keep their own record.

Every job carries a ``ref`` in its payload naming the submission it came from,
so the checks can tell an acknowledged job from one nobody asked for. What a
client may safely do after an error decides how it retries:

- ``service-keyed`` and every API submission carry an idempotency key: after
  an error (store down, connection cut, 5xx) the same request is sent again
  until it is acknowledged; every acknowledgement must name the same job.
- ``service`` submissions have no key: after an error the outcome is
  unknown (the commit may or may not have happened), so they are not
  retried; such a job may exist or not, and either is correct.

The API client also cancels a few of its jobs while they run, and retries
some of those it cancelled; it records each action and whether its outcome
is certain. From the spec and those actions, ``Submission.allowed_statuses``
says how the job may end: a job fails only if its payload fails every attempt
(a poison job, whose handler ends its process or raises SystemExit, always does),
ends cancelled only if a client cancelled it (and did not retry it after),
and otherwise completes.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

CHANNEL_WEIGHTS = {"service": 25, "service-keyed": 25, "api": 35, "api-bulk": 15}
BATCHED = {"service", "service-keyed", "service-controls", "api-bulk"}
FAR_FUTURE_SECONDS = 24 * 3600.0
# Attempts of a job meant to complete: its planned failures plus room for the attempts faults
# cost (each lease expiry or restart recovery counts one), so it never runs out by chance.
SPARE_ATTEMPTS = (8, 12)
# Poison jobs: handlers that end their attempt other than by an Exception, on every attempt.
# Each must fail with all its attempts charged, never loop (``probe.chaos_poison``).
POISON_WAYS = ("system_exit", "os_exit", "oom_kill")
POISON_SHARE = 0.02


@dataclass(frozen=True)
class Spec:
    """One job a client means to submit."""

    ref: str
    channel: str
    at: float  # seconds after the submissions began
    type: str
    payload: dict[str, Any]
    priority: str
    queue: str
    delay: float | None  # run_at = now + delay; None = at once
    max_attempts: int
    key: str | None
    # The job controls (scripts/chaoslib/controls.py): a unique key (default scope: one live
    # job per key), a concurrency key (the "keyed" queue's per-key limit), an expiry.
    unique_key: str | None = None
    concurrency_key: str | None = None
    expires_in: float | None = None
    # The statuses the job may end in when nobody cancels it, when the plan knows better than
    # ``natural_status`` (a workflow step its dependency's failure cancels, an expiring job).
    expected: tuple[str, ...] = ()

    @property
    def far_future(self) -> bool:
        return bool(self.payload.get("far"))

    @property
    def poison(self) -> str | None:
        """How this job's handler ends every attempt (``POISON_WAYS``), or None."""
        return self.payload.get("poison")

    @property
    def natural_status(self) -> str:
        """How the job ends when nobody cancels it: failed only if it fails on every attempt.

        A far-future or tail job (``plan_tail``) is cancelled by the run itself once the
        final checks have seen it in Redis.
        """
        if self.far_future or self.payload.get("tail"):
            return "cancelled"
        if self.poison:
            return "failed"
        return "failed" if int(self.payload.get("fail_first", 0)) >= self.max_attempts else "completed"

    @property
    def natural_statuses(self) -> set[str]:
        return set(self.expected) if self.expected else {self.natural_status}

    def body(self, *, with_key: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": self.type,
            "payload": self.payload,
            "priority": self.priority,
            "queue": self.queue,
            "max_attempts": self.max_attempts,
        }
        if self.delay is not None:
            body["delay_seconds"] = self.delay
        if self.key is not None and with_key:
            body["idempotency_key"] = self.key
        return body


@dataclass
class Submission:
    """The client's record of one spec: what came back, after how many tries."""

    spec: Spec
    acked_ids: list[str] = field(default_factory=list)
    tries: int = 0
    outcome: str = "pending"  # "acked" | "unknown" | "rejected" | "pending"
    error: str = ""
    # The API client's cancels and retries of this job, in order: (action, final HTTP status or
    # None, certain). Not certain when an earlier try got no answer: it may have taken effect.
    actions: list[tuple[str, int | None, bool]] = field(default_factory=list)

    def allowed_statuses(self) -> set[str]:
        """The statuses this job may end in, given the spec and what the client did to it."""
        allowed = self.spec.natural_statuses
        for action, status, certain in self.actions:
            took_effect = status == 200
            if action == "cancel":
                if took_effect and certain:
                    allowed = {"cancelled"}
                elif took_effect or not certain:
                    allowed = allowed | {"cancelled"}
            elif action == "retry" and (took_effect or not certain):
                # A retry runs the job again from cancelled: it ends as if never cancelled.
                natural = self.spec.natural_statuses
                allowed = natural if took_effect and certain else allowed | natural
        return allowed


def plan_submissions(seed: int, count: int, *, window: float) -> list[Spec]:
    """``count`` specs spread over ``window`` seconds; a pure function of the seed."""
    rng = random.Random(seed + 2)
    channels = list(CHANNEL_WEIGHTS)
    specs = []
    burst_left, at, channel = 0, 0.0, channels[0]
    for index in range(count):
        if burst_left == 0:
            # Arrivals come in bursts (one channel, one moment): a worker then claims a batch
            # of several, and a fault can catch it with some of them not started yet.
            burst_left = rng.choices([1, rng.randint(2, 5), rng.randint(10, 20)], [60, 25, 15])[0]
            at = rng.uniform(0, window)
            channel = rng.choices(channels, [CHANNEL_WEIGHTS[c] for c in channels])[0]
        burst_left -= 1
        # Mostly short handlers, some long enough to be caught mid-run by a kill or a pause.
        sleep = rng.choices(
            [rng.uniform(0, 0.05), rng.uniform(0.05, 0.3), rng.uniform(0.5, 1.5)], [60, 30, 10]
        )[0]
        payload: dict[str, Any] = {"ref": f"r{index:06d}", "sleep": round(sleep, 3)}
        if sleep >= 0.5 and rng.random() < 0.5:
            # Sleeps on when the worker says its lease is gone: a paused worker's stale
            # attempt then reaches its completion, which the fence must reject.
            payload["stubborn"] = True
        if channel == "api" and rng.random() < 0.06:
            # An operator storm's target: the API client cancels it once it runs, and retries
            # it at once (the sequence that ran one job twice at the same time).
            payload = {"ref": payload["ref"], "sleep": 2.5, "storm": True}
        failing = rng.random()
        if failing < 0.03:
            payload["fail_first"] = 100  # fails every attempt: ends failed
        elif failing < 0.13:
            payload["fail_first"] = rng.randint(1, 2)
        timing = rng.random()
        delay = None
        if timing < 0.03:
            payload["far"] = True  # stays queued through the run: the reconciler must keep it in Redis
            delay = FAR_FUTURE_SECONDS
        elif timing < 0.10:
            delay = round(rng.uniform(1, 10), 2)
        kind = rng.choice(["probe.chaos", "probe.chaos", "probe.chaos_plain"])
        if rng.random() < POISON_SHARE:
            kind = "probe.chaos_poison"
            payload = {"ref": payload["ref"], "poison": rng.choice(POISON_WAYS)}
            delay = None
        specs.append(
            Spec(
                ref=payload["ref"],
                channel=channel,
                at=at,
                type=kind,
                payload=payload,
                priority=rng.choice(["high", "medium", "low"]),
                queue="bulk" if rng.random() < 0.25 else "default",
                delay=delay,
                max_attempts=rng.randint(2, 4)
                if payload.get("fail_first") == 100 or "poison" in payload
                else payload.get("fail_first", 0) + rng.randint(*SPARE_ATTEMPTS),
                key=None if channel == "service" else f"chaos-{seed}-{index}",
            )
        )
    return sorted(specs, key=lambda spec: (spec.at, spec.ref))


def plan_tail(seed: int, count: int) -> list[Spec]:
    """Jobs submitted after the workers stopped, so the final Redis check sees ready ids
    (in every tier and both queues) whose place and score it can verify."""
    rng = random.Random(seed + 4)
    return [
        Spec(
            ref=f"t{index:06d}",
            channel="service-keyed",
            at=0.0,
            type="probe.chaos",
            payload={"ref": f"t{index:06d}", "tail": True},
            priority=rng.choice(["high", "medium", "low"]),
            queue=rng.choice(["default", "bulk"]),
            delay=None,
            max_attempts=1,
            key=f"chaos-{seed}-t{index}",
        )
        for index in range(count)
    ]


def _batches(specs: list[Spec], started: float, stop: threading.Event):
    """Specs in time order; consecutive due specs of one batched channel come together."""
    index = 0
    while index < len(specs) and not stop.is_set():
        spec = specs[index]
        wait = started + spec.at - time.monotonic()
        if wait > 0:
            stop.wait(wait)
            continue
        batch = [spec]
        index += 1
        while (
            spec.channel in BATCHED
            and index < len(specs)
            and len(batch) < 20
            and specs[index].channel == spec.channel
            and started + specs[index].at <= time.monotonic()
        ):
            batch.append(specs[index])
            index += 1
        yield batch


class ServiceClient(threading.Thread):
    """Submits through ``queue_app.services.enqueue_jobs`` in this process."""

    def __init__(self, submissions: list[Submission], *, started: float, stop: threading.Event) -> None:
        super().__init__(name="service client", daemon=True)
        self.submissions = {s.spec.ref: s for s in submissions}
        self.specs = [s.spec for s in submissions]
        self.started = started
        self.stop = stop

    def run(self) -> None:
        from django.db import connection

        try:
            for batch in _batches(self.specs, self.started, self.stop):
                self._submit(batch)
        finally:
            connection.close()

    def _submit(self, batch: list[Spec]) -> None:
        from django.db import DatabaseError, InterfaceError, connection
        from django.utils import timezone

        from queue_app.services import JobRequest, enqueue_jobs

        keyed = batch[0].key is not None
        backoff = 0.1
        while not self.stop.is_set():
            now = timezone.now()
            requests = [
                JobRequest(
                    type=spec.type,
                    payload=spec.payload,
                    priority=spec.priority,
                    queue=spec.queue,
                    run_at=now + timedelta(seconds=spec.delay) if spec.delay is not None else None,
                    max_attempts=spec.max_attempts,
                    idempotency_key=spec.key,
                    unique_key=spec.unique_key,
                    concurrency_key=spec.concurrency_key,
                    expires_in=spec.expires_in,
                )
                for spec in batch
            ]
            for spec in batch:
                self.submissions[spec.ref].tries += 1
            try:
                jobs = enqueue_jobs(requests)
            except (DatabaseError, InterfaceError) as exc:
                connection.close()
                if not keyed:
                    for spec in batch:
                        self.submissions[spec.ref].outcome = "unknown"
                        self.submissions[spec.ref].error = f"{type(exc).__name__}: {exc}"[:300]
                    return
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            for spec, job in zip(batch, jobs, strict=True):
                record = self.submissions[spec.ref]
                record.acked_ids.append(str(job.id))
                record.outcome = "acked"
            return


class ApiClient(threading.Thread):
    """Submits over HTTP with idempotency keys, retrying on errors; cancels and retries a few jobs."""

    def __init__(
        self,
        submissions: list[Submission],
        *,
        port: int,
        token: str,
        seed: int,
        started: float,
        stop: threading.Event,
    ) -> None:
        super().__init__(name="api client", daemon=True)
        self.submissions = {s.spec.ref: s for s in submissions}
        self.specs = [s.spec for s in submissions]
        self.port = port
        self.token = token
        self.rng = random.Random(seed + 3)
        self.started = started
        self.stop = stop
        self.actions: Counter = Counter()  # ("cancel", 200) -> count
        # Acknowledged storm targets not cancelled yet (see plan_submissions).
        self.storms: list[Submission] = []
        self.http_errors: Counter = Counter()  # connection errors and 5xx, retried

    def request(self, method: str, path: str, body: Any = None, headers: dict | None = None):
        """(status, parsed body); raises OSError / HTTPException on a connection problem."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        try:
            connection.request(
                method,
                path,
                body=None if body is None else json.dumps(body),
                headers={
                    "Authorization": f"Token {self.token}",
                    "Content-Type": "application/json",
                    **(headers or {}),
                },
            )
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, None  # e.g. DEBUG's HTML page for a 500

    def send(self, method: str, path: str, body: Any = None, headers: dict | None = None):
        """Send until an answer that is not a 5xx; the same request each time.

        Returns (status, data, certain): not certain when an earlier try got no answer
        or a 5xx, since that try may have taken effect."""
        backoff = 0.1
        certain = True
        while True:
            try:
                status, data = self.request(method, path, body, headers)
                if 200 <= status < 300 and data is None:
                    # A success whose body did not arrive whole: as good as no answer.
                    self.http_errors[f"{status} without a JSON body"] += 1
                elif status < 500:
                    return status, data, certain
                else:
                    self.http_errors[str(status)] += 1
            except (OSError, http.client.HTTPException) as exc:
                self.http_errors[type(exc).__name__] += 1
            certain = False
            if self.stop.is_set():
                return None, None, False
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def run(self) -> None:
        for batch in _batches(self.specs, self.started, self.stop):
            for spec in batch:
                self.submissions[spec.ref].tries += 1
            if batch[0].channel == "api":
                status, data, _ = self.send(
                    "POST",
                    "/api/jobs/",
                    batch[0].body(with_key=False),
                    headers={"Idempotency-Key": batch[0].key},
                )
                self._record(batch, status, [data] if status in (200, 201) else data)
            else:
                status, data, _ = self.send(
                    "POST", "/api/jobs/bulk/", {"jobs": [spec.body() for spec in batch]}
                )
                self._record(batch, status, data["jobs"] if status in (200, 201) else data)
            self._maybe_cancel()
            self._storm()

    def _storm(self) -> None:
        """Cancel each storm target once a worker runs it, then retry it at once."""
        if not self.storms:
            return
        from django.db import connection

        from queue_app.models import Job

        try:
            ids = [s.acked_ids[0] for s in self.storms]
            found = {
                str(pk): status for pk, status in Job.objects.filter(id__in=ids).values_list("id", "status")
            }
        except Exception:  # noqa: BLE001 - PostgreSQL may be down (a fault): next time
            connection.close()
            return
        for record in list(self.storms):
            status = found.get(record.acked_ids[0])
            if status in ("queued", None):
                continue
            self.storms.remove(record)
            if status != "processing":
                continue  # it ran and ended between two looks: no storm this time
            job_id = record.acked_ids[0]
            for action in ("cancel", "retry"):
                answer, _, certain = self.send("POST", f"/api/jobs/{job_id}/{action}/")
                record.actions.append((action, answer, certain))
                self.actions[(f"{action}(storm)", answer)] += 1
                if answer != 200:
                    break

    @staticmethod
    def _running(acked: list[Submission]) -> list[Submission]:
        """The submissions whose job a worker runs now (one read of PostgreSQL)."""
        from django.db import connection

        from queue_app.models import Job

        by_id = {s.acked_ids[0]: s for s in acked}
        try:
            ids = Job.objects.filter(id__in=list(by_id), status="processing").values_list("id", flat=True)
            return [by_id[str(job_id)] for job_id in ids]
        except Exception:  # noqa: BLE001 - PostgreSQL may be down (a fault): any job will do
            connection.close()
            return []

    def _record(self, batch: list[Spec], status: int | None, data: Any) -> None:
        for index, spec in enumerate(batch):
            record = self.submissions[spec.ref]
            if status in (200, 201):
                record.acked_ids.append(data[index]["id"])
                record.outcome = "acked"
                if spec.payload.get("storm") and len(record.acked_ids) == 1:
                    self.storms.append(record)
            elif status is None:
                record.outcome = "pending"  # stopped while retrying
            else:
                record.outcome = "rejected"
                record.error = f"{status}: {json.dumps(data)[:300]}"

    def _maybe_cancel(self) -> None:
        """Now and then cancel one of the client's jobs, and often retry it at once. Half the
        time the job is one that runs right now (an operator storm: the cancel of a running
        job, then a retry while its attempt may still be stopping), else any of them."""
        acked = [s for s in self.submissions.values() if s.acked_ids and not s.spec.far_future]
        if not acked or self.rng.random() >= 0.08:
            return
        record, action = self.rng.choice(acked), "cancel"
        if self.rng.random() < 0.5:
            running = self._running(acked)
            if running:
                record, action = self.rng.choice(running), "cancel(running)"
        job_id = record.acked_ids[0]
        status, _, certain = self.send("POST", f"/api/jobs/{job_id}/cancel/")
        record.actions.append(("cancel", status, certain))
        self.actions[(action, status)] += 1
        if status == 200 and self.rng.random() < 0.6:
            status, _, certain = self.send("POST", f"/api/jobs/{job_id}/retry/")
            record.actions.append(("retry", status, certain))
            self.actions[("retry", status)] += 1
