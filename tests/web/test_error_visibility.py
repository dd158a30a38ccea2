"""Through the real server: a job's owner sees 'ExceptionType: message'; the traceback, with its server
paths and source lines, only users with queue_app.view_job."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from queue_app import services
from queue_app.engine import execution
from tests.helpers import claim_jobs
from tests.web.conftest import request

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True), pytest.mark.redis]

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/billing/tasks.py", line 12, in send_invoice\n'
    "    secret = settings.PAYMENT_KEY\n"
    "ValueError: invoice 42 has no lines\n"
)


@pytest.fixture
def failed_job(user):
    job = services.enqueue_job("demo.echo", {}, owner=user)
    (claimed,) = claim_jobs([str(job.id)], worker_id="visibility-test")
    execution.fail_job(
        claimed.id,
        claimed.fence,
        "ValueError: invoice 42 has no lines",
        retry=False,
        error_class="builtins.ValueError",
        traceback=TRACEBACK,
    )
    return job


def fetch(port: int, path: str, token: str) -> dict:
    response, content = request(port, "GET", path, Authorization=f"Token {token}")
    assert response.status == 200, content
    return json.loads(content)


def test_owner_sees_type_and_message_only(production_port, token, failed_job):
    job = fetch(production_port, f"/api/jobs/{failed_job.id}/", token)
    assert job["last_error"] == "ValueError: invoice 42 has no lines"
    assert job["last_error_traceback"] is None
    listed = fetch(production_port, "/api/jobs/", token)["results"]
    assert [item["last_error_traceback"] for item in listed] == [None]
    logs = fetch(production_port, f"/api/jobs/{failed_job.id}/logs/", token)
    assert "/srv/app" not in json.dumps(logs)


def test_a_user_with_view_job_sees_the_traceback(production_port, failed_job):
    operator = get_user_model().objects.create_user("operator", password="unused-password")
    operator.user_permissions.add(Permission.objects.get(codename="view_job"))
    key = Token.objects.create(user=operator).key
    job = fetch(production_port, f"/api/jobs/{failed_job.id}/", key)
    assert job["last_error"] == "ValueError: invoice 42 has no lines"
    assert job["last_error_traceback"] == TRACEBACK
