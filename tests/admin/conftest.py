"""Jobs in every status, made through the services, and clients with chosen admin permissions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from queue_app import services
from queue_app.engine import execution
from queue_app.engine.execution import Completion
from queue_app.models import Job
from tests.helpers import claim_jobs

CHANGELIST = "admin:queue_app_job_changelist"
QUEUES = "default,emails,reports:fifo"


def make_job(
    status: str = "queued",
    *,
    type: str = "demo.echo",
    queue: str = "default",
    priority: str = "medium",
    error: str = "RuntimeError: boom",
    idempotency_key: str | None = None,
) -> Job:
    """A job brought to ``status`` the way the system gets there: enqueue, claim, settle."""
    job = services.enqueue_job(
        type, {"n": 1}, queue=queue, priority=priority, idempotency_key=idempotency_key
    )
    if status == "cancelled":
        services.cancel_job(job.id)
    elif status == "expired":
        Job.objects.filter(id=job.id).update(expires_at=timezone.now() - timedelta(seconds=1))
        execution.expire_queued_jobs()
    elif status in ("processing", "completed", "failed"):
        (claimed,) = claim_jobs([str(job.id)], worker_id="admin-tests")
        if status == "completed":
            execution.complete_jobs([Completion(claimed.id, claimed.fence, {"ok": True})])
        elif status == "failed":
            execution.fail_job(claimed.id, claimed.fence, error, retry=False)
    else:
        assert status == "queued", status
    job = Job.objects.get(id=job.id)
    assert job.status == status
    return job


@pytest.fixture
def queues(queue_config):
    """Three queues, one of them strict FIFO."""
    queue_config(QUEUES=QUEUES)


@pytest.fixture
def user_client(db):
    """A logged-in client for a new user: ``user_client(*codenames, staff=True)``."""

    def login(*codenames: str, staff: bool = True, username: str = "operator") -> Client:
        user = get_user_model().objects.create_user(username, password="pw", is_staff=staff)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="queue_app", codename__in=codenames)
        )
        client = Client()
        client.force_login(user)
        return client

    return login


def listed_ids(response) -> set[str]:
    """Ids of the jobs on a change-list page."""
    assert response.status_code == 200, response.status_code
    return {str(job.pk) for job in response.context["cl"].result_list}


def changelist(query: str = "") -> str:
    return reverse(CHANGELIST) + (f"?{query}" if query else "")
