"""Optional OpenTelemetry spans: enqueue, relay, claim and run, and a link from each run to its enqueue.

Off unless ``TRACING_ENABLED``; when off, nothing here imports opentelemetry,
so it need not be installed. When on, spans go to the global tracer provider
the application configures (the SDK with an exporter); with only
opentelemetry-api installed they are no-ops.

A job runs long after, and in another process than, the request that
enqueued it, so the run span is not a child of the enqueue: the enqueue's
context is stored with the job (``Job.trace_context``, W3C traceparent) and
the run span *links* to it, as OpenTelemetry's messaging conventions do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from queue_app.conf import queue_settings

TRACER_NAME = "queue_app"
F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    return queue_settings().TRACING_ENABLED


def _tracer():
    from opentelemetry import trace

    return trace.get_tracer(TRACER_NAME)


def current_context() -> dict[str, str] | None:
    """The current trace context as propagation headers, to store with a new job; None when off."""
    if not enabled():
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


def traced(name: str) -> Callable[[F], F]:
    """Run the decorated function inside a span called ``name`` when tracing is on."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not enabled():
                return func(*args, **kwargs)
            with _tracer().start_as_current_span(name):
                return func(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate


@contextmanager
def run_span(job: Any) -> Iterator[None]:
    """The span of one attempt, linked to the span that enqueued the job (if it was traced)."""
    from opentelemetry import propagate, trace

    links = []
    if isinstance(job.trace_context, dict):
        enqueued = trace.get_current_span(propagate.extract(job.trace_context)).get_span_context()
        if enqueued.is_valid:
            links.append(trace.Link(enqueued))
    attributes = {
        "jobqueue.job.id": job.id,
        "jobqueue.job.type": job.type,
        "jobqueue.job.queue": job.queue,
        "jobqueue.job.attempt": job.attempt,
    }
    with _tracer().start_as_current_span(
        "jobqueue.run", kind=trace.SpanKind.CONSUMER, links=links, attributes=attributes
    ):
        yield
