"""What one request costs the stores, and that its shortcuts answer exactly as the long way would.

The token's lookup reads the user's permissions in the same statement, so a
submit is two queries (that lookup, the insert) and two Redis commands (the
auth-failure counter, then the push of the committed job, not waited for).
Permissions are read with every request: a change counts from the next one.
Job bodies (one job, a page of the list) are built without a ModelSerializer,
and must equal JobSerializer's output key for key.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from queue_app import services
from queue_app.api.serializers import JobSerializer, job_body
from queue_app.engine import execution
from tests.api.conftest import make_user, submit, token_client
from tests.helpers import claim_jobs

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


def view_job() -> Permission:
    return Permission.objects.get(codename="view_job", content_type__app_label="queue_app")


def sees_tracebacks(client) -> bool:
    """Whether the API treats the client as holding queue_app.view_job (the body shows it)."""
    return submit(client, type="demo.echo").json()["last_error_traceback"] is not None


def test_a_submit_is_two_queries_and_two_redis_commands(api, monkeypatch, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        submit(api, type="demo.echo")  # warm: the first request (and push) of a process does more
    commands: list[bytes] = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):
        commands.append(command if isinstance(command, bytes) else b"".join(command))
        return send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    # The test's transaction never commits: the push after the commit runs on leaving the block.
    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
        response = submit(api, type="demo.echo")

    assert response.status_code == 201
    assert len(queries.captured_queries) == 2, [query["sql"][:120] for query in queries.captured_queries]
    assert len(commands) == 2, commands
    assert b"auth-failures:" in commands[0]
    assert b"EVAL" in commands[1] and b":priority" in commands[1], commands[1][:200]


def test_a_permission_removed_from_a_user_counts_from_the_next_request():
    user = make_user("carol")
    client = token_client(user)
    assert not sees_tracebacks(client)
    assert client.get("/api/stats/").status_code == 403

    user.user_permissions.add(view_job())
    assert sees_tracebacks(client)
    assert client.get("/api/stats/").status_code == 200

    user.user_permissions.remove(view_job())
    assert not sees_tracebacks(client)
    assert client.get("/api/stats/").status_code == 403


def test_permissions_through_a_group_count_and_stop_counting_with_the_membership():
    user = make_user("dave")
    operators = Group.objects.create(name="operators")
    operators.permissions.add(view_job())
    client = token_client(user)

    user.groups.add(operators)
    assert sees_tracebacks(client)
    assert client.get("/api/stats/").status_code == 200

    operators.permissions.remove(view_job())
    assert not sees_tracebacks(client)
    operators.permissions.add(view_job())
    user.groups.remove(operators)
    assert not sees_tracebacks(client)


def test_a_superuser_has_every_permission():
    user = make_user("root")
    user.is_superuser = True
    user.save()
    client = token_client(user)
    assert sees_tracebacks(client)
    assert client.get("/api/stats/").status_code == 200


def test_an_inactive_users_token_is_refused():
    user = make_user("gone")
    client = token_client(user)
    user.is_active = False
    user.save()
    response = client.get("/api/jobs/")
    assert response.status_code == 401


def _jobs(owner):
    """Jobs in every shape a body shows: queued, scheduled with a key, failed with a traceback, completed."""
    queued = services.enqueue_job("demo.echo", {"n": 1}, owner=owner)
    scheduled = services.enqueue_job(
        "demo.echo",
        {"nested": {"list": [1, 2.5, None, "x"]}},
        owner=owner,
        priority=7,
        run_at=timezone.now() + timedelta(hours=1),
        idempotency_key="key-1",
    )
    failed = services.enqueue_job("demo.echo", {}, owner=owner)
    (claimed,) = claim_jobs([str(failed.id)], worker_id="body-test")
    execution.fail_job(
        claimed.id,
        claimed.fence,
        "ValueError: no",
        retry=False,
        error_class="builtins.ValueError",
        traceback="Traceback (most recent call last):\nValueError: no\n",
    )
    done = services.enqueue_job("demo.echo", {"n": 2}, owner=owner)
    (claimed,) = claim_jobs([str(done.id)], worker_id="body-test")
    execution.complete_jobs([execution.Completion(str(claimed.id), claimed.fence, {"answer": [42, "x"]})])
    return [queued, scheduled, failed, done]


@pytest.mark.parametrize("holds_view_job", [False, True])
def test_job_body_is_what_job_serializer_gives(holds_view_job):
    from queue_app.models import Job

    user = make_user("erin")
    if holds_view_job:
        user.user_permissions.add(view_job())
        user = type(user).objects.get(pk=user.pk)  # a fresh object: no cached permissions
    request = Request(APIRequestFactory().get("/api/jobs/", HTTP_HOST="testserver"))
    request.user = user
    created = _jobs(user)
    for job in [*created, *Job.objects.filter(pk__in=[job.pk for job in created])]:
        expected = JobSerializer(job, context={"request": request}).data
        body = job_body(job, request)
        assert list(body) == list(expected)
        assert body == expected


@pytest.mark.parametrize("holds_view_job", [False, True])
def test_a_job_and_a_page_of_jobs_answer_with_job_serializer_bodies(holds_view_job):
    from queue_app.models import Job

    user = make_user("frank")
    if holds_view_job:
        user.user_permissions.add(view_job())
    client = token_client(user)
    created = _jobs(user)
    request = Request(APIRequestFactory().get("/api/jobs/", HTTP_HOST="testserver"))
    request.user = type(user).objects.get(pk=user.pk)

    def expected(job_id):
        return JobSerializer(Job.objects.get(pk=job_id), context={"request": request}).data

    for job in created:
        assert client.get(f"/api/jobs/{job.pk}/").json() == expected(job.pk)
    page = client.get("/api/jobs/", {"ordering": "created_at"}).json()["results"]
    assert page == [expected(job.pk) for job in created]
