"""After a real run the scraped counters equal what PostgreSQL recorded.

A separate process enqueues a mix of jobs that succeed, fail for good and
succeed after a retry, on two queues; two ``runworker`` processes and a
relay run them, every process writing its values to one
PROMETHEUS_MULTIPROC_DIR (prometheus_client's multiprocess mode); then
/metrics is scraped and each counter is compared with the job table and
the log trail, which record every transition.
"""

import signal
import subprocess
import sys
from collections import Counter

import pytest
from django.test import Client

from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.observability.metrics import MULTIPROC_ENV
from queue_app.states import TERMINAL
from tests.helpers import PROJECT_ROOT, Events, child_env, manage, wait_until
from tests.observability.support import parse, sample

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

TOKEN = "scrape-token"
QUEUES = "default,emails"
ENQUEUE_MIX = """
import django
django.setup()
from queue_app.services import enqueue_job
for n in range(6):
    enqueue_job("demo.echo", {"n": n}, queue="default" if n % 2 else "emails")
for n in range(2):
    enqueue_job("probe.fail", {"n": n})
    enqueue_job("probe.run", {"fail_first": 1, "n": n}, queue="emails")
"""


def sql_counts() -> dict[str, Counter]:
    """Per (type, queue): what the job table and its log trail say happened."""
    jobs = list(Job.objects.values_list("id", "type", "queue", "status"))
    labels = {job_id: (job_type, queue) for job_id, job_type, queue, _ in jobs}
    events = Counter(
        (event, labels[job_id]) for job_id, event in JobLog.objects.values_list("job_id", "event")
    )

    def by_event(*names: str) -> Counter:
        return Counter({key: count for (event, key), count in events.items() if event in names})

    return {
        "jobqueue_jobs_enqueued_total": Counter(labels.values()),
        "jobqueue_jobs_started_total": by_event("claimed"),
        "jobqueue_jobs_completed_total": Counter(
            (job_type, queue) for _, job_type, queue, status in jobs if status == "completed"
        ),
        "jobqueue_jobs_failed_total": Counter(
            (job_type, queue) for _, job_type, queue, status in jobs if status == "failed"
        ),
        "jobqueue_jobs_retried_total": by_event("retry_scheduled", "lease_expired_requeued"),
        "handed_back": by_event("handed_back"),
        "fenced": by_event("completion_fenced", "failure_fenced", "heartbeat_fenced"),
    }


def test_scraped_counters_equal_the_sql_counts_after_a_run(processes, tmp_path, queue_config, monkeypatch):
    queue_config(QUEUES=QUEUES, METRICS_TOKEN=TOKEN)
    env = child_env(
        **{
            MULTIPROC_ENV: str(tmp_path),
            "JOBQUEUE_QUEUES": QUEUES,
            "JOBQUEUE_RETRY_BACKOFF_BASE_SECONDS": "0.2",
            "JOBQUEUE_RETRY_BACKOFF_MAX_SECONDS": "0.5",
            "LOG_LEVEL": "INFO",
        }
    )
    subprocess.run([sys.executable, "-c", ENQUEUE_MIX], cwd=PROJECT_ROOT, env=env, check=True)
    processes.append(manage("runrelay", env=env, stderr=subprocess.DEVNULL))
    workers = [
        Events(manage("runworker", f"--name={name}", env=env, stderr=subprocess.PIPE, text=True))
        for name in ("metrics-a", "metrics-b")
    ]
    processes.extend(worker.process for worker in workers)
    # Both up before the SIGTERM below: one sent while Django still loads kills the process.
    for worker in workers:
        wait_until(lambda worker=worker: worker.named("worker_started"), timeout=60, message="a worker")
    wait_until(
        lambda: Job.objects.count() == 10 and not Job.objects.exclude(status__in=TERMINAL).exists(),
        timeout=120,
        message="every job to finish",
    )
    # The relay's pass over the rows the enqueuer pushed itself runs once their grace is
    # over: wait for it, or the backlog gauge counts them (then due, not yet marked).
    wait_until(
        lambda: not OutboxMessage.objects.filter(dispatched_at__isnull=True).exists(),
        timeout=60,
        message="the relay to mark every outbox row dispatched",
    )
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        assert process.wait(timeout=60) == 0

    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    scraped = parse(response.content.decode())
    expected = sql_counts()

    # The mix really happened: successes, final failures, and retries on both queues.
    assert sum(expected["jobqueue_jobs_completed_total"].values()) == 8
    assert expected["jobqueue_jobs_failed_total"] == {("probe.fail", "default"): 2}
    assert expected["jobqueue_jobs_retried_total"] == {
        ("probe.fail", "default"): 4,
        ("probe.run", "emails"): 2,
    }
    assert not expected["fenced"]
    label_pairs = set(expected["jobqueue_jobs_enqueued_total"])
    assert {queue for _, queue in label_pairs} == {"default", "emails"}
    for name in (
        "jobqueue_jobs_enqueued_total",
        "jobqueue_jobs_started_total",
        "jobqueue_jobs_completed_total",
        "jobqueue_jobs_failed_total",
        "jobqueue_jobs_retried_total",
    ):
        for job_type, queue in label_pairs:
            assert sample(scraped, name, type=job_type, queue=queue) == expected[name][job_type, queue], (
                name,
                job_type,
                queue,
            )
    for job_type, queue in label_pairs:
        started = expected["jobqueue_jobs_started_total"][job_type, queue]
        ran = started - expected["handed_back"][job_type, queue]
        assert sample(scraped, "jobqueue_job_wait_seconds_count", type=job_type, queue=queue) == started
        assert sample(scraped, "jobqueue_job_run_seconds_count", type=job_type, queue=queue) == ran
    # The gauges agree too: everything finished, nothing left to relay or run.
    assert (
        sample(scraped, "jobqueue_jobs", queue="emails", status="completed")
        == Job.objects.filter(queue="emails", status="completed").count()
    )
    assert sample(scraped, "jobqueue_outbox_backlog", queue="default") == 0
    assert sample(scraped, "jobqueue_jobs", queue="default", status="queued") == 0
