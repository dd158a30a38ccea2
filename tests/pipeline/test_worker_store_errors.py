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


def test_store_error_while_settling_a_job_hands_the_rest_of_its_batch_back():
    cut, *rest = enqueue_jobs(
        [JobRequest(type="probe.cut_connection"), JobRequest(type="probe.run"), JobRequest(type="probe.run")]
    )
    relay_all()  # all three are in Redis before the worker starts: one pop takes them as one batch
    relay = Relay(poll_seconds=0.1)
    relay_thread = threading.Thread(target=_relay, args=(relay,), daemon=True)
    relay_thread.start()
    worker = Worker(worker_id="batch-worker", queues=["default"], burst=True)
    timed_out = threading.Event()

    def stop_the_worker() -> None:
        timed_out.set()
        worker.stopping = True

    # Ends the run if the rest of the batch stays held and unrun (it did, until the worker stopped).
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
        assert events(job) == ["enqueued", "claimed", "handed_back", "claimed", "completed"]
        assert job.attempts == 1 and Execution.objects.filter(job_id=job.id).count() == 1
    # The attempt whose failure could not be written is left to its lease (the reconciler
    # settles it), not kept alive by the heartbeat with nobody to settle it.
    cut.refresh_from_db()
    assert cut.status == "processing" and cut.attempts == 1
    assert worker.held == {} and not timed_out.is_set()
    assert Job.objects.filter(status="queued").count() == 0
