"""Job counters and timings for Prometheus, counted where each state change commits.

The engine calls one hook per state change (``jobs_started``, ``job_failed``,
...) right after the statement that made it; the hook counts once the
transaction commits (``on_commit``), so a rolled-back claim or a fenced
completion is never counted, and every path (worker, supervisor, reconciler)
is counted once. With ``METRICS_ENABLED`` off a hook returns before building
anything, and prometheus_client is never imported.

Several processes: with ``PROMETHEUS_MULTIPROC_DIR`` set before a process
starts, prometheus_client keeps its values in files there, and /metrics sums
every process's files (see ``counters_registry``). ``runsystem`` sets it up.
"""

from __future__ import annotations

import os
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import transaction

from queue_app.conf import queue_settings

# Seconds: from a few milliseconds (no-op jobs, a hot queue) to an hour (long jobs, a backlog).
DURATION_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    *(30, 60, 120, 300, 600, 1800, 3600),
)
JOB_LABELS = ("type", "queue")
# Read by prometheus_client when it is first imported, so set before a process starts.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class Instruments:
    enqueued: Any
    started: Any
    completed: Any
    failed: Any
    retried: Any
    fenced: Any
    run_seconds: Any
    wait_seconds: Any
    reconciler_actions: Any

    def all(self) -> list[Any]:
        return list(vars(self).values())


@cache
def instruments() -> Instruments:
    """The metric objects, made on first use (not registered globally: ``counters_registry``
    picks a registry)."""
    from prometheus_client import Counter, Histogram

    def counter(name: str, documentation: str, labels: tuple[str, ...] = JOB_LABELS) -> Any:
        return Counter(name, documentation, labels, registry=None)

    return Instruments(
        enqueued=counter(
            "jobqueue_jobs_enqueued", "Jobs created (a repeated idempotency key is not counted)."
        ),
        started=counter("jobqueue_jobs_started", "Attempts started: jobs claimed by a worker."),
        completed=counter("jobqueue_jobs_completed", "Jobs completed."),
        failed=counter("jobqueue_jobs_failed", "Jobs failed for good (no attempt left, or not retried)."),
        retried=counter("jobqueue_jobs_retried", "Failed attempts queued again after a backoff."),
        fenced=counter(
            "jobqueue_jobs_fenced",
            "Outcomes or heartbeats rejected because the attempt no longer held the job.",
            (*JOB_LABELS, "kind"),
        ),
        run_seconds=Histogram(
            "jobqueue_job_run_seconds",
            "Time a worker spent on one attempt, from the handler's start to its outcome.",
            JOB_LABELS,
            buckets=DURATION_BUCKETS,
            registry=None,
        ),
        wait_seconds=Histogram(
            "jobqueue_job_wait_seconds",
            "Time from when a job became ready (enqueue, scheduled start or retry due time) to its claim.",
            JOB_LABELS,
            buckets=DURATION_BUCKETS,
            registry=None,
        ),
        reconciler_actions=counter(
            "jobqueue_reconciler_actions", "Changes the reconciler made, by action.", ("action",)
        ),
    )


def enabled() -> bool:
    return queue_settings().METRICS_ENABLED


def prepare() -> None:
    """Import prometheus_client and make the metrics now, if on (cached after the first call).

    Called before a claim: made on first use inside the claim's commit, they
    would stretch the moment between a job turning 'processing' and starting
    to run, where a SIGTERM hands it back unrun.
    """
    if enabled():
        instruments()


def _after_commit(count: Callable[[], None]) -> None:
    # robust: a metrics failure is logged and never breaks the caller's commit.
    transaction.on_commit(count, robust=True)


def _count(metric: Any, tally: Tally) -> None:
    for labels, amount in tally.items():
        metric.labels(*labels).inc(amount)


def jobs_enqueued(jobs: Iterable[Any]) -> None:
    """Jobs just created (objects with ``type`` and ``queue``)."""
    if not enabled():
        return
    tally = Tally((job.type, job.queue) for job in jobs)
    if tally:
        _after_commit(lambda: _count(instruments().enqueued, tally))


def jobs_started(claims: Iterable[tuple[str, str, float]]) -> None:
    """Claimed attempts as (type, queue, seconds since the job became ready)."""
    if not enabled():
        return
    waits: dict[tuple[str, str], list[float]] = {}
    for job_type, queue, waited in claims:
        waits.setdefault((job_type, queue), []).append(max(waited, 0.0))
    if not waits:
        return

    def count() -> None:
        metrics = instruments()
        # One label look-up per (type, queue), not per job.
        for labels, seconds in waits.items():
            metrics.started.labels(*labels).inc(len(seconds))
            histogram = metrics.wait_seconds.labels(*labels)
            for waited in seconds:
                histogram.observe(waited)

    _after_commit(count)


def jobs_completed(jobs: Iterable[tuple[str, str]]) -> None:
    """Completed jobs as (type, queue)."""
    if not enabled():
        return
    tally = Tally(jobs)
    if tally:
        _after_commit(lambda: _count(instruments().completed, tally))


def job_failed(job_type: str, queue: str, *, retried: bool) -> None:
    """A failed attempt: queued again (retried) or failed for good."""
    if not enabled():
        return

    def count() -> None:
        metrics = instruments()
        (metrics.retried if retried else metrics.failed).labels(job_type, queue).inc()

    _after_commit(count)


def jobs_fenced(jobs: Iterable[tuple[str, str]], *, kind: str) -> None:
    """Attempts whose outcome (or heartbeat) the fence rejected, as (type, queue); kind names which."""
    if not enabled():
        return
    tally = Tally((job_type, queue, kind) for job_type, queue in jobs)
    if tally:
        _after_commit(lambda: _count(instruments().fenced, tally))


def job_ran(job_type: str, queue: str, seconds: float) -> None:
    """How long a worker spent on one attempt (measured in the worker, not a state change)."""
    if enabled():
        instruments().run_seconds.labels(job_type, queue).observe(seconds)


def reconciler_acted(counts: Tally) -> None:
    """What one committed reconciler pass changed, by action."""
    if not enabled():
        return
    metrics = instruments()
    for action, amount in counts.items():
        if amount:
            metrics.reconciler_actions.labels(action).inc(amount)


def counters_registry():
    """A registry holding every process's counters: the files in PROMETHEUS_MULTIPROC_DIR
    when it is set, else this process's own."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    directory = multiprocess_directory()
    if directory:
        MultiProcessCollector(registry, path=directory)
    else:
        for metric in instruments().all():
            registry.register(metric)
    return registry


def multiprocess_directory() -> str:
    """Where the processes of this host keep their values ("" when each keeps its own)."""
    return os.environ.get(MULTIPROC_ENV, "")
