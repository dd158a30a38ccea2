"""One rule with the admin: queue_app's model permissions decide what staff see and do in the API.

The reference is the admin itself (tests/admin/test_permissions.py): staff
without permissions are refused there, so they get no more than any user here.
"""

import pytest

from tests.api.conftest import submit, token_client


@pytest.fixture
def bobs_job(bob_api) -> str:
    return submit(bob_api, type="demo.echo").json()["id"]


@pytest.mark.django_db
def test_staff_without_permissions_see_and_touch_only_their_own_jobs(bare_staff, bobs_job):
    client = token_client(bare_staff)
    own = submit(client, type="demo.echo").json()["id"]

    assert [job["id"] for job in client.get("/api/jobs/").json()["results"]] == [own]
    assert client.get(f"/api/jobs/{bobs_job}/").status_code == 404
    assert client.get(f"/api/jobs/{bobs_job}/logs/").status_code == 404
    assert client.post(f"/api/jobs/{bobs_job}/cancel/").status_code == 404
    assert client.post(f"/api/jobs/{bobs_job}/retry/").status_code == 404
    assert client.get("/api/stats/").status_code == 403
    assert client.post(f"/api/jobs/{own}/cancel/").status_code == 200


@pytest.mark.django_db
def test_view_permission_reads_every_job_but_changes_none_but_its_own(viewer, bobs_job, bob_api):
    client = token_client(viewer)

    assert client.get(f"/api/jobs/{bobs_job}/").status_code == 200
    assert client.get(f"/api/jobs/{bobs_job}/logs/").status_code == 200
    assert client.get("/api/stats/").status_code == 200
    response = client.post(f"/api/jobs/{bobs_job}/cancel/")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert bob_api.get(f"/api/jobs/{bobs_job}/").json()["status"] == "queued"


@pytest.mark.django_db
def test_change_permission_cancels_and_retries_another_users_job(staff_api, bobs_job, bob_api):
    assert staff_api.post(f"/api/jobs/{bobs_job}/cancel/").status_code == 200
    assert staff_api.post(f"/api/jobs/{bobs_job}/retry/").status_code == 200
    assert bob_api.get(f"/api/jobs/{bobs_job}/").json()["status"] == "queued"
