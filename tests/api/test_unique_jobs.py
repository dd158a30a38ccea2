"""Unique keys over HTTP: a held key answers 200 with the job holding it, as a repeated
idempotency key does (201 is for a job this request created)."""

import pytest

from queue_app.models import Job
from queue_app.states import Status
from tests.api.conftest import post_json, rows_written, submit

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

BULK = "/api/jobs/bulk/"


def test_a_held_unique_key_answers_200_with_the_job_holding_it(api):
    first = submit(api, payload={"n": 1}, unique_key="report", unique_for=3600)
    again = submit(api, payload={"n": 2}, unique_key="report", unique_for=3600)

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert first.json()["unique_key"] == "report" and first.json()["payload"] == {"n": 1}
    assert "Location" in first.headers and "Location" not in again.headers
    assert rows_written() == (1, 1, 1)


def test_unique_keys_are_per_user(api, bob_api, alice, bob):
    mine = submit(api, unique_key="k").json()
    theirs = submit(bob_api, unique_key="k")

    assert theirs.status_code == 201 and theirs.json()["id"] != mine["id"]
    assert Job.objects.get(id=mine["id"]).owner == alice
    assert Job.objects.get(id=theirs.json()["id"]).owner == bob


def test_the_statuses_are_the_requests_own(api):
    job = submit(api, unique_key="k").json()
    Job.objects.filter(id=job["id"]).update(status="completed")

    assert submit(api, unique_key="k", unique_states=["completed"]).json()["id"] == job["id"]
    assert submit(api, unique_key="k").status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"unique_key": 5}, "unique_key"),
        ({"unique_key": "x" * 256}, "unique_key"),
        ({"unique_key": "k", "unique_for": "60"}, "unique_for"),
        ({"unique_key": "k", "unique_for": 0}, "unique_for"),
        ({"unique_key": "k", "unique_for": True}, "unique_for"),
        ({"unique_key": "k", "unique_states": "queued"}, "unique_states"),
        ({"unique_key": "k", "unique_states": []}, "unique_states"),
        ({"unique_key": "k", "unique_states": ["asleep"]}, "unique_states"),
        ({"unique_for": 60}, "unique_for"),
        ({"unique_states": ["queued"]}, "unique_states"),
    ],
)
def test_bad_unique_fields_are_400_naming_the_field(api, body, field):
    response = submit(api, **body)

    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]
    assert rows_written() == (0, 0, 0)


def test_a_bulk_creates_one_job_per_key_within_it_and_against_earlier_jobs(api):
    held = submit(api, unique_key="held").json()
    jobs = [
        {"type": "demo.echo", "payload": {"i": 0}, "unique_key": "new"},
        {"type": "demo.echo", "payload": {"i": 1}, "unique_key": "held"},
        {"type": "demo.echo", "payload": {"i": 2}, "unique_key": "new"},
        {"type": "demo.echo", "payload": {"i": 3}},
    ]

    response = post_json(api, BULK, {"jobs": jobs})
    again = post_json(api, BULK, {"jobs": jobs[:3]})

    assert response.status_code == 201, response.json()
    body = response.json()["jobs"]
    assert body[1]["id"] == held["id"] and body[2]["id"] == body[0]["id"]
    assert [job["payload"] for job in body] == [{"i": 0}, {}, {"i": 0}, {"i": 3}]
    assert again.status_code == 200
    assert [job["id"] for job in again.json()["jobs"]] == [job["id"] for job in body[:3]]
    assert rows_written() == (3, 3, 3)


def test_a_bad_unique_field_in_a_bulk_names_the_item(api):
    jobs = [{"type": "demo.echo", "unique_key": "k"}, {"type": "demo.echo", "unique_for": 5}]

    response = post_json(api, BULK, {"jobs": jobs})

    assert response.status_code == 400
    assert [(item["index"], list(item["errors"])) for item in response.json()["items"]] == [
        (1, ["unique_for"])
    ]
    assert rows_written() == (0, 0, 0)


def test_the_schema_documents_the_unique_fields(client):
    schema = client.get("/api/schema/?format=json").json()
    create = schema["components"]["schemas"]["JobCreateRequest"]["properties"]

    assert create["unique_key"]["maxLength"] == 255
    assert (create["unique_for"]["minimum"], create["unique_for"]["exclusiveMinimum"]) == (0, True)
    statuses = create["unique_states"]["items"]["$ref"].rsplit("/", 1)[1]
    assert schema["components"]["schemas"][statuses]["enum"] == list(Status.values)
    assert create["unique_states"]["minItems"] == 1
    assert "unique_key" in schema["components"]["schemas"]["Job"]["properties"]
