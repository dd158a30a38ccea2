"""Traces: spans for enqueue, relay, claim and run, and the run linked to its enqueue.

Spans are collected with the OpenTelemetry SDK's in-memory exporter. The
link follows OpenTelemetry's messaging conventions: a consumer span in
another trace, linked to the producer's span context.
"""

import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from queue_app.models import Job
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import PROJECT_ROOT, child_env, run_worker

pytestmark = [pytest.mark.django_db(transaction=True)]

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _sdk():
    """The global tracer provider can be set once per process: an SDK one exporting to memory."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans():
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def named(exporter: InMemorySpanExporter, name: str) -> list:
    return [span for span in exporter.get_finished_spans() if span.name == name]


@pytest.mark.redis
def test_the_run_span_links_to_the_enqueue_span(spans, queue_config):
    queue_config(TRACING_ENABLED="true")
    with trace.get_tracer("tests").start_as_current_span("request") as request_span:
        job = enqueue_job("demo.echo", {"n": 1})
    (enqueue,) = named(spans, "jobqueue.enqueue")
    assert enqueue.parent.span_id == request_span.get_span_context().span_id
    stored = Job.objects.get(id=job.id).trace_context
    assert stored["traceparent"].split("-")[1:3] == [
        format(enqueue.context.trace_id, "032x"),
        format(enqueue.context.span_id, "016x"),
    ]

    run_worker()

    assert named(spans, "jobqueue.relay") and named(spans, "jobqueue.claim")
    (run,) = named(spans, "jobqueue.run")
    assert run.kind == trace.SpanKind.CONSUMER
    assert run.attributes["jobqueue.job.id"] == str(job.id)
    assert run.attributes["jobqueue.job.attempt"] == 1
    assert [(link.context.trace_id, link.context.span_id) for link in run.links] == [
        (enqueue.context.trace_id, enqueue.context.span_id)
    ]


@pytest.mark.redis
def test_tracing_off_stores_nothing_and_makes_no_spans(spans):
    job = enqueue_job("demo.echo", {"n": 1})
    run_worker()
    assert Job.objects.get(id=job.id).status == "completed"
    assert Job.objects.get(id=job.id).trace_context is None
    assert spans.get_finished_spans() == ()


def test_with_tracing_off_opentelemetry_need_not_be_installed():
    # None in sys.modules makes every import of the package fail, as if it were not installed.
    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import django; django.setup()\n"
        "from queue_app.engine import execution\n"
        "from queue_app.services import enqueue_job\n"
        "job = enqueue_job('demo.echo', {'n': 1})\n"
        "(claimed,) = execution.claim([str(job.id)], worker_id='no-otel').jobs\n"
        "print(claimed.trace_context)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, env=child_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_a_bulk_enqueue_stores_its_span_with_every_job(spans, queue_config):
    queue_config(TRACING_ENABLED="1")
    jobs = enqueue_jobs([JobRequest(type="demo.echo", payload={"n": n}) for n in range(3)])
    (enqueue,) = named(spans, "jobqueue.enqueue")
    span_id = format(enqueue.context.span_id, "016x")
    stored = Job.objects.filter(id__in=[job.id for job in jobs]).values_list("trace_context", flat=True)
    assert [context["traceparent"].split("-")[2] for context in stored] == [span_id] * 3
    assert all(job.trace_context["traceparent"].split("-")[2] == span_id for job in jobs)
