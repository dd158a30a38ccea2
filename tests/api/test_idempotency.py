"""Idempotency keys: one job per key, whatever the timing of the requests."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from queue_app.models import Job, JobLog, OutboxMessage
from tests.api.conftest import make_user, post_json, submit, token_client

pytestmark = pytest.mark.redis


@pytest.mark.django_db
def test_same_key_and_body_returns_the_existing_job_with_200(api):
    first = submit(api, payload={"n": 1}, idempotency_key="order-1")
    again = submit(api, payload={"n": 1}, idempotency_key="order-1")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert (Job.objects.count(), JobLog.objects.count(), OutboxMessage.objects.count()) == (1, 1, 1)


@pytest.mark.django_db
def test_the_header_and_the_field_are_the_same_key(api):
    first = post_json(api, "/api/jobs/", {"type": "demo.echo"}, HTTP_IDEMPOTENCY_KEY="order-2")
    again = submit(api, idempotency_key="order-2")
    both = post_json(
        api, "/api/jobs/", {"type": "demo.echo", "idempotency_key": "order-2"}, HTTP_IDEMPOTENCY_KEY="order-2"
    )

    assert (first.status_code, again.status_code, both.status_code) == (201, 200, 200)
    assert first.json()["idempotency_key"] == "order-2"
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_same_key_with_a_different_body_is_422(api):
    submit(api, payload={"n": 1}, idempotency_key="order-3")
    response = submit(api, payload={"n": 2}, idempotency_key="order-3")

    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert "idempotency_key" in response.json()["errors"]
    assert Job.objects.get().payload == {"n": 1}


@pytest.mark.django_db
def test_each_user_has_their_own_keys(api, bob_api, alice, bob):
    """Keys are per client, as the IETF draft "The Idempotency-Key HTTP Header Field" scopes
    them: the same key from two users makes two jobs, and neither learns of the other's."""
    mine = submit(api, payload={"secret": "alice's"}, idempotency_key="shared")
    theirs = submit(bob_api, payload={"secret": "alice's"}, idempotency_key="shared")
    theirs_again = submit(bob_api, payload={"secret": "alice's"}, idempotency_key="shared")
    mine_again = submit(api, payload={"secret": "alice's"}, idempotency_key="shared")

    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert (theirs_again.status_code, mine_again.status_code) == (200, 200)
    assert theirs.json()["id"] != mine.json()["id"]
    assert theirs_again.json()["id"] == theirs.json()["id"]
    assert mine_again.json()["id"] == mine.json()["id"]
    assert Job.objects.get(id=mine.json()["id"]).owner == alice
    assert Job.objects.get(id=theirs.json()["id"]).owner == bob


@pytest.mark.django_db
def test_a_users_reuse_of_their_key_with_another_body_is_still_422(api, bob_api):
    submit(api, payload={"n": 1}, idempotency_key="shared")
    submit(bob_api, payload={"n": 2}, idempotency_key="shared")  # bob's own key: no conflict
    response = submit(bob_api, payload={"n": 3}, idempotency_key="shared")

    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert sorted(Job.objects.values_list("payload__n", flat=True)) == [1, 2]


def _race(bodies: list[dict]) -> list:
    """Send each body from its own thread at once, each with its own client and connection."""
    user = make_user("racer")
    clients = [token_client(user) for _ in bodies]
    start = threading.Barrier(len(bodies))

    def send(client, body):
        try:
            start.wait()
            return post_json(client, "/api/jobs/", body)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(send, clients, bodies))


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_requests_create_exactly_one_job():
    responses = _race([{"type": "demo.echo", "payload": {"n": 1}, "idempotency_key": "race"}] * 8)

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 7 + [201], [r.content[:300] for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    assert (Job.objects.count(), JobLog.objects.count(), OutboxMessage.objects.count()) == (1, 1, 1)


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_different_bodies_create_one_job_and_422s():
    responses = _race(
        [{"type": "demo.echo", "payload": {"n": n}, "idempotency_key": "race-2"} for n in range(6)]
    )

    assert sorted(r.status_code for r in responses) == [201] + [422] * 5
    created = next(r for r in responses if r.status_code == 201).json()
    assert Job.objects.get().payload == created["payload"]
