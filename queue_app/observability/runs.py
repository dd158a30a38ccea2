"""What is observed around one attempt in a worker: its run time and its span."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from queue_app.observability import metrics, tracing


def observed_run(run_job: Callable[..., None]) -> Callable[..., None]:
    """Wrap ``Worker.run_job(job)``: time it for the run-time histogram, trace it as ``jobqueue.run``."""

    @functools.wraps(run_job)
    def call(worker: Any, job: Any, **options: Any) -> None:
        measure, trace = metrics.enabled(), tracing.enabled()
        if not (measure or trace):
            return run_job(worker, job, **options)
        started = time.monotonic()
        try:
            if trace:
                with tracing.run_span(job):
                    return run_job(worker, job, **options)
            return run_job(worker, job, **options)
        finally:
            if measure:
                metrics.job_ran(job.type, job.queue, time.monotonic() - started)

    return call
