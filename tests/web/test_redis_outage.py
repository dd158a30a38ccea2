"""Through the real server with its Redis (the queue's and the cache's) unreachable: token
requests still reach PostgreSQL; only the auth-failure counting stops."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from queue_app.models import Job, JobLog, OutboxMessage
from tests.api.conftest import closed_port, make_user
from tests.web.conftest import post_json, request
from tests.web.server import running

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def get(port: int, path: str, token: str) -> tuple[int, dict]:
    response, content = request(port, "GET", path, Authorization=f"Token {token}")
    return response.status, json.loads(content)


def test_token_requests_answer_while_redis_is_down(token):
    operator = make_user("operator")
    operator.user_permissions.add(Permission.objects.get(codename="view_job"))
    operator_token = Token.objects.create(user=operator).key

    # The push after the commit is on, as in production: it fails, and must not fail the request.
    redis_url = f"redis://127.0.0.1:{closed_port()}/0"
    with running("runweb", REDIS_URL=redis_url, JOBQUEUE_DISPATCH_ON_COMMIT="1") as port:
        created_status, job = post_json(port, "/api/jobs/", {"type": "demo.echo"}, token)
        listed_status, listed = get(port, "/api/jobs/", token)
        health_status, health = get(port, "/api/health/", token)
        stats_status, stats = get(port, "/api/stats/", operator_token)
        wrong_status, wrong = get(port, "/api/jobs/", "0" * 40)

    # The enqueue is committed to PostgreSQL; the relay sends its id once Redis is back.
    assert created_status == 201, job
    assert Job.objects.filter(id=job["id"]).exists()
    assert JobLog.objects.filter(job_id=job["id"]).exists()
    assert OutboxMessage.objects.filter(job_id=job["id"], dispatched_at__isnull=True).exists()
    assert listed_status == 200 and [item["id"] for item in listed["results"]] == [job["id"]]
    assert (health_status, health) == (
        503,
        {
            "status": "unavailable",
            "detail": "redis not answering",
            "checks": {"postgresql": "ok", "redis": "unavailable"},
        },
    )
    assert stats_status == 200, stats
    assert stats["redis"] is None and "ConnectionError" in stats["redis_error"]
    assert stats["jobs"]["total"] == 1
    # A wrong token is still refused; it is just not counted until Redis answers again.
    assert (wrong_status, wrong["code"]) == (401, "authentication_failed")
