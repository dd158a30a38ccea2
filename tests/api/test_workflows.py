"""POST /api/workflows/ and its reads and actions: one JSON document of steps, validated before
anything is written, with a 400 naming the bad step; the owner rules are the jobs'."""

import pytest

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.models import Job, Workflow
from queue_app.states import Status
from queue_app.testing import run_jobs
from tests.api.conftest import token_client

pytestmark = pytest.mark.django_db

DIAMOND = {
    "name": "diamond",
    "steps": [
        {"id": "fetch", "type": "wf.add", "payload": {"value": 1}},
        {"id": "left", "type": "wf.add", "payload": {"value": 10}, "depends_on": ["fetch"]},
        {
            "id": "right",
            "type": "wf.add",
            "payload": {"value": 20},
            "depends_on": ["fetch"],
            "priority": "high",
        },
        {"id": "join", "type": "wf.collect", "depends_on": ["left", "right"]},
    ],
}


def submit(client, body):
    return client.post("/api/workflows/", body, format="json")


def test_a_workflow_is_created_whole_and_read_with_each_steps_status_and_dependencies(alice):
    client = token_client(alice)
    response = submit(client, DIAMOND)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert response["Location"] == f"/api/workflows/{body['id']}/"
    assert [(s["id"], s["status"], s["depends_on"]) for s in body["steps"]] == [
        ("fetch", "queued", []),
        ("left", "waiting", ["fetch"]),
        ("right", "waiting", ["fetch"]),
        ("join", "waiting", ["left", "right"]),
    ]
    assert body["status"] == "running"
    assert Job.objects.filter(owner=alice).count() == 4
    assert Job.objects.get(id=body["steps"][2]["job"]).priority == "high"

    run_jobs()
    read = client.get(f"/api/workflows/{body['id']}/").json()
    assert read["status"] == "completed"
    assert {s["status"] for s in read["steps"]} == {"completed"}
    join = Job.objects.get(id=read["steps"][3]["job"])
    assert join.result == {"results": [11, 21], "names": ["left", "right"]}
    assert client.get(read["steps"][3]["job_url"]).status_code == 200


@pytest.mark.parametrize(
    ("steps", "bad_step", "field"),
    [
        (
            [
                {"id": "a", "type": "wf.add", "depends_on": ["b"]},
                {"id": "b", "type": "wf.add", "depends_on": ["a"]},
            ],
            "a",
            "depends_on",
        ),
        ([{"id": "a", "type": "wf.add"}, {"id": "b", "type": "no.such.type"}], "b", "type"),
        (
            [{"id": "a", "type": "wf.add"}, {"id": "b", "type": "wf.add", "depends_on": ["nope"]}],
            "b",
            "depends_on",
        ),
        ([{"id": "a", "type": "wf.add"}, {"id": "a", "type": "wf.add"}], "a", "id"),
        ([{"id": "a", "type": "wf.add", "colour": "red"}], "a", "colour"),
        ([{"id": "a", "type": "wf.add", "depends_on": "a"}], "a", "depends_on"),
    ],
    ids=["cycle", "unknown-type", "unknown-dependency", "duplicate-id", "unknown-field", "not-a-list"],
)
def test_a_bad_step_is_a_400_naming_it_and_nothing_is_written(alice, steps, bad_step, field):
    response = submit(token_client(alice), {"steps": steps})
    assert response.status_code == 400, response.json()
    body = response.json()
    assert field in body["errors"]["steps"][bad_step], body
    assert f"steps.{bad_step}" in body["detail"]
    assert not Job.objects.exists() and not Workflow.objects.exists()


def test_more_steps_than_the_limit_are_refused(alice, queue_config):
    queue_config(WORKFLOW_MAX_STEPS=2)
    steps = [{"id": str(i), "type": "wf.add"} for i in range(3)]
    response = submit(token_client(alice), {"steps": steps})
    assert response.status_code == 400
    assert "WORKFLOW_MAX_STEPS" in response.json()["detail"]
    assert not Job.objects.exists()


def test_another_users_workflow_is_a_404_and_staff_may_act_on_it(alice, bob, staff):
    body = submit(token_client(alice), DIAMOND).json()
    url = f"/api/workflows/{body['id']}/"
    assert token_client(bob).get(url).status_code == 404
    assert token_client(bob).post(url + "cancel/").status_code == 404
    assert token_client(staff).get(url).status_code == 200
    assert token_client(staff).post(url + "cancel/").status_code == 200
    assert token_client(alice).get("/api/workflows/not-a-uuid/").status_code == 404


def test_cancel_then_retry_a_workflow(alice):
    client = token_client(alice)
    body = submit(client, DIAMOND).json()
    url = f"/api/workflows/{body['id']}/"
    cancelled = client.post(url + "cancel/").json()
    assert cancelled["changed"] == 4
    assert cancelled["status"] == Status.CANCELLED
    assert {s["status"] for s in cancelled["steps"]} == {"cancelled"}

    retried = client.post(url + "retry/").json()
    assert retried["changed"] == 4
    assert [s["status"] for s in retried["steps"]] == ["queued", "waiting", "waiting", "waiting"]
    run_jobs()
    assert client.get(url).json()["status"] == "completed"


def test_a_step_may_depend_on_an_existing_job_of_its_owner_only(alice, bob):
    mine = token_client(alice).post("/api/jobs/", {"type": "wf.add"}, format="json").json()["id"]
    steps = [{"id": "after", "type": "wf.add", "depends_on": [mine]}]
    assert submit(token_client(alice), {"steps": steps}).status_code == 201
    refused = submit(token_client(bob), {"steps": steps})
    assert refused.status_code == 400
    assert "another owner" in refused.json()["errors"]["steps"]["after"]["depends_on"][0]
