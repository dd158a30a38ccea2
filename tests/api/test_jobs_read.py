"""GET /api/jobs/ and /api/jobs/{id}/(logs/): filters, ordering, cursor pages, ownership."""

import base64
import json
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit
from uuid import UUID

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from queue_app import services
from queue_app.engine import execution
from queue_app.models import Job
from tests.api.conftest import post_json, submit
from tests.helpers import claim_jobs

pytestmark = pytest.mark.redis


def _cursor(ordering: str, *values) -> str:
    """A cursor as the API writes one, here with values a client made up."""
    token = json.dumps({"o": ordering, "v": list(values), "r": False}).encode()
    return base64.urlsafe_b64encode(token).decode()


def _ids(response) -> list[str]:
    return [job["id"] for job in response.json()["results"]]


def _walk(client, url: str) -> list[str]:
    """Every id, following next links."""
    ids: list[str] = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.json()
        ids += _ids(response)
        url = response.json()["next"]
    return ids


@pytest.mark.django_db
def test_list_is_newest_first_and_only_the_users_own_jobs(api, bob_api):
    mine = [submit(api, payload={"n": n}).json()["id"] for n in range(3)]
    submit(bob_api)

    response = api.get("/api/jobs/")

    assert response.status_code == 200
    assert set(response.json()) == {"next", "previous", "results"}
    assert _ids(response) == mine[::-1]
    assert response.json()["next"] is None and response.json()["previous"] is None


@pytest.mark.django_db
def test_staff_see_every_users_jobs(api, bob_api, staff_api):
    submit(api)
    submit(bob_api)

    assert len(_ids(staff_api.get("/api/jobs/"))) == 2


@pytest.mark.django_db
def test_cursor_pages_cover_a_bulk_sharing_one_created_at_exactly_once(api):
    # One transaction: every job has the same created_at, so the id breaks ties.
    post_json(
        api, "/api/jobs/bulk/", {"jobs": [{"type": "demo.echo", "payload": {"n": n}} for n in range(25)]}
    )
    assert Job.objects.values("created_at").distinct().count() == 1
    submit(api)

    newest_first = _walk(api, "/api/jobs/?page_size=4")
    oldest_first = _walk(api, "/api/jobs/?page_size=7&ordering=created_at")

    assert len(newest_first) == len(set(newest_first)) == 26
    assert oldest_first == newest_first[::-1]
    expected = list(Job.objects.order_by("-created_at", "-id").values_list("id", flat=True))
    assert newest_first == [str(pk) for pk in expected]


@pytest.mark.django_db
def test_previous_links_walk_back_to_the_first_page(api):
    post_json(api, "/api/jobs/bulk/", {"jobs": [{"type": "demo.echo"} for _ in range(10)]})
    first = api.get("/api/jobs/?page_size=3").json()
    second = api.get(first["next"]).json()
    third = api.get(second["next"]).json()

    back = api.get(third["previous"]).json()
    start = api.get(back["previous"]).json()

    assert [j["id"] for j in back["results"]] == [j["id"] for j in second["results"]]
    assert [j["id"] for j in start["results"]] == [j["id"] for j in first["results"]]
    assert start["previous"] is None


@pytest.mark.django_db
def test_a_page_is_one_keyset_query_without_offset(api):
    post_json(api, "/api/jobs/bulk/", {"jobs": [{"type": "demo.echo"} for _ in range(5)]})
    next_url = api.get("/api/jobs/?page_size=2").json()["next"]

    with CaptureQueriesContext(connection) as queries:
        assert api.get(next_url).status_code == 200

    page_query = next(q["sql"] for q in queries.captured_queries if 'FROM "queue_app_jobs"' in q["sql"])
    assert "OFFSET" not in page_query.upper()
    assert 'ORDER BY "queue_app_jobs"."created_at" DESC, "queue_app_jobs"."id" DESC' in page_query
    assert "LIMIT 3" in page_query


@pytest.mark.django_db
def test_a_users_pages_read_their_jobs_by_the_owner_index_among_many_others(api, alice):
    # Without the index the page reads the table from its newest row until it has found a
    # page of Alice's jobs: every job of everyone, when hers are few or old.
    mine = [job.pk for job in services.enqueue_jobs([services.JobRequest("demo.echo")] * 60, owner=alice)]
    for _ in range(3):
        services.enqueue_jobs([services.JobRequest("demo.echo")] * 1000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")

    plans = []
    url, seen = "/api/jobs/?page_size=50", []
    while url:
        with CaptureQueriesContext(connection) as queries:
            response = api.get(url)
        seen += _ids(response)
        url = response.json()["next"]
        page_query = next(q["sql"] for q in queries.captured_queries if 'FROM "queue_app_jobs"' in q["sql"])
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {page_query}")
            plans.append("\n".join(row[0] for row in cursor.fetchall()))

    assert sorted(seen) == sorted(str(pk) for pk in mine)
    assert len(plans) == 2
    for plan in plans:
        assert "idx_jobs_owner_created" in plan, plan
        assert "Seq Scan" not in plan and "idx_jobs_created_at" not in plan, plan


@pytest.mark.django_db
def test_filters(api, alice):
    high = submit(api, type="demo.echo", priority="high").json()["id"]
    other_queue_type = submit(api, type="probe.run", priority="low").json()["id"]
    failed = submit(api, type="demo.fail").json()["id"]
    [claimed] = claim_jobs([failed], worker_id="test")
    execution.fail_job(failed, claimed.fence, "boom", retry=False)
    old = submit(api).json()["id"]
    Job.objects.filter(id=old).update(created_at=timezone.now() - timedelta(days=3))
    cutoff = (timezone.now() - timedelta(days=1)).isoformat()

    def ids(query: str) -> set[str]:
        response = api.get(f"/api/jobs/?{query}")
        assert response.status_code == 200, response.json()
        return set(_ids(response))

    assert ids("status=failed") == {failed}
    assert ids("status=failed&status=queued") == {high, other_queue_type, failed, old}
    assert ids("type=probe.run") == {other_queue_type}
    assert ids("priority=high") == {high}
    assert ids("queue=default") == {high, other_queue_type, failed, old}
    assert ids("queue=elsewhere") == set()
    assert ids(f"created_before={cutoff.replace('+', '%2B')}") == {old}
    assert ids(f"created_after={cutoff.replace('+', '%2B')}") == {high, other_queue_type, failed}
    assert ids("created_after=2000-01-01T00:00:00Z&type=demo.echo&priority=high") == {high}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query, field",
    [
        ("status=done", "status"),
        ("priority=urgent", "priority"),
        ("created_after=yesterday", "created_after"),
        ("created_before=0001-01-01T00:00:00%2B05:00", "created_before"),
        ("ordering=priority", "ordering"),
        ("cursor=not-a-cursor", "cursor"),
        ("cursor=eyJvIjoiLWNyZWF0ZWRfYXQiLCJ2IjpbIngiLCJ5Il0sInIiOmZhbHNlfQ==", "cursor"),
        ("page_size=0", "page_size"),
        ("page_size=501", "page_size"),
        ("page_size=ten", "page_size"),
        ("page_size=%C2%B2", "page_size"),  # "²": a digit to str.isdigit(), not to int()
        ("page_size=" + "0" * 5000 + "1", "page_size"),  # beyond int()'s digit limit
        # Times and ids that parse but no row can hold: refused here, not by PostgreSQL.
        (f"cursor={_cursor('-created_at', '9999-12-31T23:59:59-23:00', str(UUID(int=0)))}", "cursor"),
        (f"cursor={_cursor('-created_at', '2020-01-01T00:00:00Z', 'Infinity')}", "cursor"),
        ("type=a%00b", "type"),
    ],
)
def test_invalid_list_parameters_are_400(api, query, field):
    response = api.get(f"/api/jobs/?{query}")

    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]


@pytest.mark.django_db
def test_a_cursor_from_one_ordering_is_refused_by_the_other(api):
    post_json(api, "/api/jobs/bulk/", {"jobs": [{"type": "demo.echo"} for _ in range(3)]})
    cursor = parse_qs(urlsplit(api.get("/api/jobs/?page_size=1").json()["next"]).query)["cursor"][0]

    response = api.get("/api/jobs/", {"cursor": cursor, "ordering": "created_at"})

    assert response.status_code == 400 and "cursor" in response.json()["errors"]


@pytest.mark.django_db
def test_retrieve_own_job_and_404_for_anyone_elses(api, bob_api, staff_api):
    job = submit(api).json()

    assert api.get(f"/api/jobs/{job['id']}/").json() == job
    assert staff_api.get(f"/api/jobs/{job['id']}/").status_code == 200
    hidden = bob_api.get(f"/api/jobs/{job['id']}/")
    assert hidden.status_code == 404
    assert hidden.json() == api.get("/api/jobs/00000000-0000-0000-0000-000000000000/").json()
    assert api.get("/api/jobs/not-a-uuid/").status_code == 404


@pytest.mark.django_db
def test_detail_routes_ignore_list_filters(api):
    job = submit(api).json()

    assert api.get(f"/api/jobs/{job['id']}/?status=completed").status_code == 200


@pytest.mark.django_db
def test_logs_list_the_trail_oldest_first(api, bob_api):
    job_id = submit(api, type="demo.fail").json()["id"]
    [claimed] = claim_jobs([job_id], worker_id="w1")
    execution.fail_job(job_id, claimed.fence, "boom", retry=False)
    services.retry_job(job_id)

    response = api.get(f"/api/jobs/{job_id}/logs/")

    assert response.status_code == 200
    results = response.json()["results"]
    assert [row["event"] for row in results] == ["enqueued", "claimed", "failed", "retried"]
    assert set(results[0]) == {"id", "created_at", "level", "event", "message", "extra"}
    assert results[2]["level"] == "error" and results[2]["message"] == "boom"
    assert bob_api.get(f"/api/jobs/{job_id}/logs/").status_code == 404


@pytest.mark.django_db
def test_logs_paginate(api):
    job_id = submit(api).json()["id"]
    for _ in range(4):
        services.cancel_job(job_id)
        services.retry_job(job_id)

    events = []
    url = f"/api/jobs/{job_id}/logs/?page_size=2"
    while url:
        page = api.get(url).json()
        events += [row["event"] for row in page["results"]]
        url = page["next"]

    assert events == ["enqueued"] + ["cancelled", "retried"] * 4


@pytest.mark.django_db
def test_invalid_log_page_parameters_are_400(api):
    job_id = submit(api).json()["id"]

    for query in [
        "cursor=zzz",
        "page_size=0",
        "page_size=%C2%B2",
        f"cursor={_cursor('id', 1e999)}",  # json reads it as infinity
        f"cursor={_cursor('id', 2**70)}",
    ]:
        response = api.get(f"/api/jobs/{job_id}/logs/?{query}")
        assert response.status_code == 400, (query, response.content[:300])
        assert query.split("=")[0] in response.json()["errors"], query
