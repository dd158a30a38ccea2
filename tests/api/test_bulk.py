"""POST /api/jobs/bulk/: up to 1,000 jobs in one transaction, all or nothing."""

import pytest

from queue_app.models import Job, JobLog, OutboxMessage
from tests.api.conftest import post_json, rows_written

pytestmark = pytest.mark.redis

BULK = "/api/jobs/bulk/"


def _jobs(count: int, **fields) -> list[dict]:
    return [{"type": "demo.echo", "payload": {"n": n}, **fields} for n in range(count)]


@pytest.mark.django_db
def test_bulk_creates_every_job_in_order_with_log_and_outbox_rows(api, alice):
    response = post_json(api, BULK, {"jobs": _jobs(3) + [{"type": "probe.run", "priority": "low"}]})

    assert response.status_code == 201, response.json()
    jobs = response.json()["jobs"]
    assert [job["payload"] for job in jobs] == [{"n": 0}, {"n": 1}, {"n": 2}, {}]
    assert jobs[3]["priority"] == "low" and jobs[3]["max_attempts"] == 5
    assert rows_written() == (4, 4, 4)
    assert set(Job.objects.values_list("owner", flat=True)) == {alice.pk}


@pytest.mark.django_db
def test_a_thousand_jobs_are_accepted(api):
    response = post_json(api, BULK, {"jobs": _jobs(1000)})

    assert response.status_code == 201
    assert len(response.json()["jobs"]) == 1000
    assert rows_written() == (1000, 1000, 1000)


@pytest.mark.django_db
def test_one_bad_job_rejects_the_whole_request_and_names_each_one(api):
    jobs = _jobs(5)
    jobs[1]["type"] = "os.system"
    jobs[3]["priority"] = "urgent"
    jobs[4]["payload"] = {"s": "\u0000"}

    response = post_json(api, BULK, {"jobs": jobs})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "jobs_rejected"
    assert [(item["index"], list(item["errors"])) for item in body["items"]] == [
        (1, ["type"]),
        (3, ["priority"]),
        (4, ["payload"]),
    ]
    assert body["items"][0]["code"] == "unknown_type"
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_an_oversized_payload_in_a_bulk_is_413(api, queue_config):
    queue_config(MAX_PAYLOAD_BYTES=50)
    jobs = _jobs(3)
    jobs[2]["payload"] = {"x": "a" * 60}

    response = post_json(api, BULK, {"jobs": jobs})

    assert response.status_code == 413
    assert response.json()["items"][0]["index"] == 2
    assert response.json()["items"][0]["code"] == "payload_too_large"
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body, field",
    [
        ({"jobs": []}, "jobs"),
        ({"jobs": _jobs(1001)}, "jobs"),
        ({"jobs": {"type": "demo.echo"}}, "jobs"),
        ({}, "jobs"),
        ({"jobs": _jobs(1), "extra": 1}, "extra"),
        ([{"type": "demo.echo"}], "non_field_errors"),
    ],
    ids=["empty", "1001 jobs", "not a list", "missing", "unknown field", "body a list"],
)
def test_a_malformed_envelope_is_400(api, body, field):
    response = post_json(api, BULK, body)

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_a_bulk_item_that_is_not_an_object_is_named(api):
    response = post_json(api, BULK, {"jobs": [{"type": "demo.echo"}, "demo.echo"]})

    assert response.status_code == 400
    assert response.json()["items"][0]["index"] == 1
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_a_key_repeated_inside_one_bulk_is_400(api):
    response = post_json(api, BULK, {"jobs": _jobs(3, idempotency_key="same")})

    assert response.status_code == 400
    assert [item["index"] for item in response.json()["items"]] == [1, 2]
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_the_idempotency_header_is_refused_on_bulk(api):
    response = post_json(api, BULK, {"jobs": _jobs(1)}, HTTP_IDEMPOTENCY_KEY="k")

    assert response.status_code == 400
    assert "idempotency_key" in response.json()["errors"]
    assert rows_written() == (0, 0, 0)


@pytest.mark.django_db
def test_replaying_a_keyed_bulk_returns_the_same_jobs_with_200(api):
    jobs = [{**job, "idempotency_key": f"batch-{n}"} for n, job in enumerate(_jobs(3))]
    first = post_json(api, BULK, {"jobs": jobs})
    again = post_json(api, BULK, {"jobs": jobs})
    partly_new = post_json(api, BULK, {"jobs": [*jobs, {"type": "demo.echo", "idempotency_key": "batch-9"}]})

    assert (first.status_code, again.status_code, partly_new.status_code) == (201, 200, 201)
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    assert Job.objects.count() == 4


@pytest.mark.django_db
def test_a_reused_key_in_a_bulk_names_the_item_and_rolls_everything_back(api, bob_api):
    post_json(api, "/api/jobs/", {"type": "demo.echo", "payload": {"n": 99}, "idempotency_key": "mine"})
    post_json(bob_api, "/api/jobs/", {"type": "demo.echo", "idempotency_key": "bobs"})
    before = rows_written()
    jobs = _jobs(4)
    jobs[1]["idempotency_key"] = "mine"  # same key, different payload: 422
    jobs[3]["idempotency_key"] = "bobs"  # another user's key: this user's own, free

    response = post_json(api, BULK, {"jobs": jobs})

    assert response.status_code == 422, response.json()
    items = response.json()["items"]
    assert [(item["index"], item["code"]) for item in items] == [(1, "idempotency_key_reused")]
    assert rows_written() == before
    assert JobLog.objects.count() == OutboxMessage.objects.count() == 2


@pytest.mark.django_db
def test_a_bulk_with_another_users_keys_creates_its_own_jobs(api, bob_api):
    keyed = [{**job, "idempotency_key": f"k-{n}"} for n, job in enumerate(_jobs(2))]
    bobs = post_json(bob_api, BULK, {"jobs": keyed})
    mine = post_json(api, BULK, {"jobs": keyed})

    assert (bobs.status_code, mine.status_code) == (201, 201)
    assert not {j["id"] for j in bobs.json()["jobs"]} & {j["id"] for j in mine.json()["jobs"]}
    assert Job.objects.count() == 4
