"""/api/queues/: list the queues, pause and resume one, set its limits (staff with change_job)."""

import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.db import connection

from queue_app.engine.controls import QUEUE_LOCK_CLASS
from queue_app.models import QueueState
from tests.api.conftest import token_client

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def patch_json(client, url, body):
    import json

    return client.patch(url, data=json.dumps(body), content_type="application/json")


def test_list_shows_every_configured_queue_and_its_controls(staff_api):
    response = staff_api.get("/api/queues/")
    assert response.status_code == 200
    assert response.json() == [
        {
            "name": "default",
            "fifo": False,
            "paused": False,
            "concurrency_limit": None,
            "rate_limit": None,
            "key_concurrency_limit": None,
            "key_rate_limit": None,
        }
    ]


def test_pause_and_resume_change_the_record(staff_api):
    response = staff_api.post("/api/queues/default/pause/")
    assert response.status_code == 200, response.json()
    assert response.json()["paused"] is True
    assert QueueState.objects.get(name="default").paused is True
    assert staff_api.get("/api/queues/default/").json()["paused"] is True

    response = staff_api.post("/api/queues/default/resume/")
    assert response.json()["paused"] is False
    assert QueueState.objects.get(name="default").paused is False


def test_patch_sets_and_removes_limits_one_field_at_a_time(staff_api):
    response = patch_json(staff_api, "/api/queues/default/", {"concurrency_limit": 2})
    assert response.status_code == 200, response.json()
    assert (response.json()["concurrency_limit"], response.json()["rate_limit"]) == (2, None)
    response = patch_json(staff_api, "/api/queues/default/", {"rate_limit": 2.5})
    assert (response.json()["concurrency_limit"], response.json()["rate_limit"]) == (2, 2.5)
    response = patch_json(staff_api, "/api/queues/default/", {"concurrency_limit": None})
    assert (response.json()["concurrency_limit"], response.json()["rate_limit"]) == (None, 2.5)
    state = QueueState.objects.get(name="default")
    assert (state.concurrency_limit, state.rate_limit) == (None, 2.5)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"concurrency_limit": 0}, "concurrency_limit"),
        ({"concurrency_limit": "2"}, "concurrency_limit"),
        ({"concurrency_limit": 1.5}, "concurrency_limit"),
        ({"rate_limit": 0}, "rate_limit"),
        ({"rate_limit": -1}, "rate_limit"),
        ({"rate_limit": True}, "rate_limit"),
        ({"paused": True}, "paused"),
        ({}, "non_field_errors"),
    ],
)
def test_bad_limits_are_a_400_naming_the_field_and_change_nothing(staff_api, body, field):
    response = patch_json(staff_api, "/api/queues/default/", body)
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not QueueState.objects.exists()


def test_an_unknown_queue_is_a_404(staff_api):
    assert staff_api.get("/api/queues/nope/").status_code == 404
    response = staff_api.post("/api/queues/nope/pause/")
    assert response.status_code == 404
    assert response.json()["code"] == "unknown_queue"
    assert not QueueState.objects.exists()


def test_changes_need_staff_with_change_job(api, viewer, bare_staff, staff_api):
    # A plain user, staff with view_job only, staff without permissions: none may pause.
    for client in (api, token_client(viewer), token_client(bare_staff)):
        assert client.post("/api/queues/default/pause/").status_code == 403
        assert patch_json(client, "/api/queues/default/", {"rate_limit": 1}).status_code == 403
    assert not QueueState.objects.exists()
    # Reading needs view_job.
    assert api.get("/api/queues/").status_code == 403
    assert token_client(viewer).get("/api/queues/").status_code == 200


def test_anonymous_requests_are_refused(client):
    assert client.get("/api/queues/").status_code in (401, 403)
    assert client.post("/api/queues/default/pause/").status_code in (401, 403)


@pytest.mark.django_db(transaction=True)
def test_two_patches_of_different_limits_at_once_both_hold(staff):
    """Each PATCH keeps the limit it leaves out: read and written under the queue's lock,
    not read before it (where both read "no limits" and the later write undid the other)."""
    clients = [token_client(staff), token_client(staff)]
    bodies = [{"concurrency_limit": 3}, {"rate_limit": 1.5}]

    def send(client, body):
        try:
            return patch_json(client, "/api/queues/default/", body)
        finally:
            connection.close()

    holder = psycopg.connect(**connection.get_connection_params())
    try:
        # The queue's lock held elsewhere: both requests reach it and wait there.
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext('default'))", [QUEUE_LOCK_CLASS])
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(send, client, body) for client, body in zip(clients, bodies, strict=True)]
            deadline = time.monotonic() + 10
            while _waiting_on_advisory_locks(holder) < 2:
                assert time.monotonic() < deadline, "the requests never waited on the queue's lock"
                time.sleep(0.02)
            holder.rollback()
            responses = [future.result(timeout=10) for future in futures]
    finally:
        holder.close()

    assert [response.status_code for response in responses] == [200, 200]
    state = QueueState.objects.get(name="default")
    assert (state.concurrency_limit, state.rate_limit) == (3, 1.5)


def _waiting_on_advisory_locks(conn) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchone()[0]
