"""The worker when a store fails in the middle of a batch: nothing it claimed is left stranded."""

import threading

import pytest
from django.db import connection

from queue_app.models import Job, JobLog
from queue_app.runtime.relay import Relay
from queue_app.runtime.worker import Worker
from queue_app.services import JobRequest, enqueue_jobs
from tests.helpers import relay_all
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def events(job) -> list[str]:
    return list(JobLog.objects.filter(job_id=job.id).order_by("id").values_list("event", flat=True))


def _relay(relay: Relay) -> None:
    try:
        relay.run()
    finally:
        connection.close()


def test_a_handler_that_cuts_its_connection_fails_on_a_new_one_and_the_batch_goes_on():
    cut, *rest = enqueue_jobs(
        [JobRequest(type="probe.cut_connection"), JobRequest(type="probe.run"), JobRequest(type="probe.run")]
    )
    relay_all()  # all three are in Redis before the worker starts: one pop takes them as one batch
    relay = Relay(poll_seconds=0.1)
    relay_thread = threading.Thread(target=_relay, args=(relay,), daemon=True)
    relay_thread.start()
    worker = Worker(worker_id="batch-worker", queues=["default"], burst=True, with_scheduled=True)
    timed_out = threading.Event()

    def stop_the_worker() -> None:
        timed_out.set()
        worker.stopping = True

    # Ends the run if the rest of the batch stays held and unrun.
    deadline = threading.Timer(30, stop_the_worker)
    deadline.start()
    try:
        worker.run()
    finally:
        deadline.cancel()
        relay.stopping = True
        relay_thread.join(timeout=10)

    for job in rest:
        job.refresh_from_db()
        assert job.status == "completed"
        assert events(job) == ["enqueued", "claimed", "completed"]
        assert job.attempts == 1 and Execution.objects.filter(job_id=job.id).count() == 1
    # Each attempt's failure is written on a fresh connection: it counts, and ends the job.
    cut.refresh_from_db()
    assert cut.status == "failed" and cut.attempts == 2
    assert events(cut) == ["enqueued", "claimed", "retry_scheduled", "claimed", "failed"]
    assert len(worker.holdings) == 0 and not timed_out.is_set()
    assert Job.objects.filter(status="queued").count() == 0
