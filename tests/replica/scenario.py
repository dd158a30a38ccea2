"""What the pages and the engine read, observed in a process whose settings name a replica.

Run by tests/replica/test_replica_reads.py as ``python -m tests.replica.scenario <name>``
with DATABASE_URL naming the primary and DATABASE_REPLICA_URL its standby: Django's
connections are configured once per process, so a test cannot point them elsewhere
itself. Each scenario prints one JSON object of what it saw, as its last line; the test
asserts on it. ``replica_lost`` stops halfway: it prints ``stop-replica`` and waits for
a line on stdin, sent once the standby is down.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from structlog.testing import capture_logs  # noqa: E402

from queue_app import services  # noqa: E402
from queue_app.engine import execution  # noqa: E402
from queue_app.models import Job  # noqa: E402
from queue_app.replica import REPLICA_ALIAS  # noqa: E402

JOB_LIST = "/admin/queue_app/job/"
LOG_LIST = "/admin/queue_app/joblog/"
OUTBOX_LIST = "/admin/queue_app/outboxmessage/"
DASHBOARD = "/admin/queue_app/job/dashboard/?fragment=1"
API_JOBS = "/api/jobs/"
API_STATS = "/api/stats/"


def staff_client() -> Client:
    user = get_user_model().objects.create_superuser(f"admin-{uuid.uuid4().hex[:8]}", password="x")
    client = Client()
    client.force_login(user)
    return client


def replica_sql(statement: str, params=None):
    with connections[REPLICA_ALIAS].cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone()


def primary_sql(statement: str, params=None):
    with connections["default"].cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone()


def catch_up() -> None:
    """Wait until the replica has replayed what the primary has written so far."""
    written = primary_sql("SELECT pg_current_wal_lsn()::text")[0]
    deadline = time.monotonic() + 30
    while not replica_sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [written])[0]:
        if time.monotonic() > deadline:
            raise AssertionError(f"the replica did not replay up to {written} in 30 s")
        time.sleep(0.05)


def pause_replay() -> None:
    catch_up()
    replica_sql("SELECT pg_wal_replay_pause()")


def resume_replay() -> None:
    replica_sql("SELECT pg_wal_replay_resume()")
    catch_up()


def primary_status(job: Job) -> str:
    return Job.objects.using("default").values_list("status", flat=True).get(pk=job.pk)


def new_job() -> Job:
    return services.enqueue_job("demo.echo", {"marker": uuid.uuid4().hex})


def lists_showing(client: Client, job: Job) -> dict:
    """Each history page's status and whether it shows ``job``."""
    job_id = str(job.id)
    seen = {}
    for name, url in (("admin_jobs", JOB_LIST), ("admin_logs", LOG_LIST), ("admin_outbox", OUTBOX_LIST)):
        response = client.get(url)
        seen[name] = [response.status_code, job_id in response.content.decode()]
    response = client.get(API_JOBS)
    seen["api_jobs"] = [
        response.status_code,
        any(item["id"] == job_id for item in response.json()["results"]),
    ]
    response = client.get(API_STATS)
    seen["api_stats_total"] = [response.status_code, response.json()["jobs"]["total"]]
    return seen


def own_pages(client: Client, job: Job) -> dict:
    """The job's own admin page and API detail: status, and whether they show it."""
    job_id = str(job.id)
    page = client.get(f"{JOB_LIST}{job_id}/change/")
    detail = client.get(f"{API_JOBS}{job_id}/")
    return {
        "admin_job_page": [page.status_code, job_id in page.content.decode()],
        "api_job": [detail.status_code, detail.status_code == 200 and detail.json()["id"] == job_id],
    }


def reads() -> dict:
    """History pages read the replica (and see replay held back); a job's own pages read the primary."""
    client = staff_client()
    pause_replay()
    job = new_job()
    primary_total = Job.objects.using("default").count()
    paused = lists_showing(client, job)
    own = own_pages(client, job)
    resume_replay()
    resumed = lists_showing(client, job)
    return {"primary_total": primary_total, "paused": paused, "own": own, "resumed": resumed}


def dashboard() -> dict:
    """The dashboard's job count while replay is held back, and after."""
    client = staff_client()
    pause_replay()
    before = Job.objects.using("default").count()
    for _ in range(3):
        new_job()
    paused = client.get(DASHBOARD)
    resume_replay()
    resumed = client.get(DASHBOARD)
    return {
        "jobs_before": before,
        "jobs_after": Job.objects.using("default").count(),
        "paused": [paused.status_code, paused.context["snapshot"].total_jobs],
        "resumed": [resumed.status_code, resumed.context["snapshot"].total_jobs],
    }


def engine() -> dict:
    """With replay held back, a claim, a cancel and a retry act on jobs the replica has not seen:
    called as a worker and application code call them, and as the admin's and the API's actions."""
    client = staff_client()
    pause_replay()
    claimed_job, admin_cancelled_job = new_job(), new_job()
    seen = {}
    claimed = execution.claim([str(claimed_job.id)], worker_id="replica-scenario").jobs
    seen["claimed"] = [job.id for job in claimed] == [str(claimed_job.id)]
    seen["after_claim"] = primary_status(claimed_job)
    seen["cancel_returned"] = services.cancel_job(claimed_job.id, reason="cancelled by the scenario").status
    seen["after_cancel"] = primary_status(claimed_job)
    # The admin's action is a POST to the very list whose GET reads the replica.
    response = client.post(
        JOB_LIST,
        {"action": "cancel_selected", "_selected_action": [str(admin_cancelled_job.id)], "index": "0"},
    )
    seen["admin_cancel"] = [response.status_code, primary_status(admin_cancelled_job)]
    response = client.post(f"{API_JOBS}{admin_cancelled_job.id}/retry/")
    seen["api_retry"] = [response.status_code, response.json().get("status")]
    seen["service_cancel_then_retry"] = [
        services.cancel_job(admin_cancelled_job.id).status,
        services.retry_job(admin_cancelled_job.id).status,
    ]
    both = [claimed_job.pk, admin_cancelled_job.pk]
    seen["replica_has_them"] = Job.objects.using(REPLICA_ALIAS).filter(pk__in=both).count()
    resume_replay()
    seen["replica_has_them_after"] = Job.objects.using(REPLICA_ALIAS).filter(pk__in=both).count()
    return seen


def replica_lost() -> dict:
    """The pages read the replica; it goes down; they read the primary, with a warning logged."""
    client = staff_client()
    job = new_job()
    catch_up()
    response = client.get(API_JOBS)
    seen = {"before": [response.status_code, connections[REPLICA_ALIAS].connection is not None]}
    print("stop-replica", flush=True)
    sys.stdin.readline()
    second = new_job()
    with capture_logs() as logs:
        seen["after"] = lists_showing(client, second)
    seen["own"] = own_pages(client, job)
    seen["warnings"] = sorted({entry["event"] for entry in logs if entry["log_level"] == "warning"})
    return seen


SCENARIOS = {"reads": reads, "dashboard": dashboard, "engine": engine, "replica_lost": replica_lost}

if __name__ == "__main__":
    setup_test_environment()  # the test client's host, 'testserver', is allowed
    print(json.dumps(SCENARIOS[sys.argv[1]](), default=str), flush=True)
