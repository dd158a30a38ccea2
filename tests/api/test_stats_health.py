"""GET /api/stats/ against real rows and Redis contents; GET /api/health/ with a store down."""

import socket
import time
from datetime import timedelta
from uuid import UUID

import pytest
from django.db import connection
from django.utils import timezone

from queue_app import broker, services
from queue_app.conf import queue_settings
from queue_app.engine import execution
from queue_app.engine import stats as engine_stats
from queue_app.engine.execution import Completion
from queue_app.models import Job, OutboxMessage
from tests.api.conftest import closed_port, post_json, run_in_child, submit
from tests.helpers import claim_jobs, database_url

pytestmark = pytest.mark.redis


def _relay(rows) -> None:
    """Apply outbox rows to Redis and mark them dispatched, as the relay does."""
    queues = queue_settings().QUEUES
    intents = [
        broker.Intent(row.action, str(row.job_id), row.queue, queues[row.queue], row.score) for row in rows
    ]
    broker.apply(broker.get_client(), intents)
    OutboxMessage.objects.filter(id__in=[row.id for row in rows]).update(dispatched_at=timezone.now())


@pytest.fixture
def two_queues(queue_config):
    queue_config(QUEUES="default,bulk:fifo")


@pytest.mark.django_db
def test_stats_match_the_rows_and_redis(api, staff_api, two_queues):
    ready = [submit(api, payload={"n": n}).json()["id"] for n in range(3)]
    assert submit(api, delay_seconds=3600).status_code == 201
    assert (
        post_json(api, "/api/jobs/bulk/", {"jobs": [{"type": "demo.echo", "queue": "bulk"}] * 2}).status_code
        == 201
    )
    running, done, failed, cancelled = (submit(api, queue="bulk").json()["id"] for _ in range(4))
    for job_id, outcome in ((running, None), (done, "complete"), (failed, "fail")):
        [claimed] = claim_jobs([job_id], worker_id="w")
        if outcome == "complete":
            execution.complete_jobs([Completion(job_id, claimed.fence, None)])
        elif outcome == "fail":
            execution.fail_job(job_id, claimed.fence, "boom", retry=False)
    services.cancel_job(cancelled)
    rows = list(OutboxMessage.objects.order_by("id"))
    assert [(row.job_id, row.action) for row in rows[-2:]] == [
        (UUID(cancelled), "enqueue"),
        (UUID(cancelled), "remove"),
    ]
    _relay(rows[:-2])
    Job.objects.filter(id=ready[0]).update(enqueued_at=timezone.now() - timedelta(seconds=120))

    response = staff_api.get("/api/stats/")

    assert response.status_code == 200
    stats = response.json()
    assert stats["jobs"] == {
        "total": 10,
        "by_status": {
            "waiting": 0,
            "queued": 6,
            "processing": 1,
            "cancelling": 0,
            "completed": 1,
            "failed": 1,
            "cancelled": 1,
            "expired": 0,
        },
        "by_queue": {
            "default": {
                "waiting": 0,
                "queued": 4,
                "processing": 0,
                "cancelling": 0,
                "completed": 0,
                "failed": 0,
                "cancelled": 0,
                "expired": 0,
            },
            "bulk": {
                "waiting": 0,
                "queued": 2,
                "processing": 1,
                "cancelling": 0,
                "completed": 1,
                "failed": 1,
                "cancelled": 1,
                "expired": 0,
            },
        },
    }
    # Redis as the relayed rows left it. The last two outbox rows (the enqueue and
    # the removal of the cancelled job) are pending; the claims went straight to
    # PostgreSQL, so the FIFO list still holds the 2 bulk ids and the 3 claimed ones.
    assert stats["redis"] == {
        "default": {"priority": 3, "fifo": 0, "retry": 1},
        "bulk": {"priority": 0, "fifo": 2 + 3, "retry": 0},
    }
    assert stats["redis_error"] is None
    assert stats["outbox"]["pending"] == 2
    assert stats["outbox"]["oldest_pending_age_seconds"] >= 0
    assert 120 <= stats["oldest_queued_age_seconds"] < 180


@pytest.mark.django_db
def test_stats_of_an_empty_system(staff_api):
    stats = staff_api.get("/api/stats/").json()

    assert stats["jobs"]["total"] == 0
    assert stats["jobs"]["by_queue"] == {"default": dict.fromkeys(stats["jobs"]["by_status"], 0)}
    assert stats["oldest_queued_age_seconds"] is None
    assert stats["outbox"] == {"pending": 0, "oldest_pending_age_seconds": None}
    assert stats["redis"] == {"default": {"priority": 0, "fifo": 0, "retry": 0}}


@pytest.mark.django_db
def test_large_counts_are_estimates_and_the_oldest_due_job_comes_from_redis(api, staff_api, monkeypatch):
    """Above the exact-count limit the figures say they are estimates; the oldest due job is
    then looked up among the ids first in line in Redis, so one missing from Redis is not seen."""
    ids = [
        submit(api, payload={"n": n}, priority=p).json()["id"] for n, p in enumerate(["low", "high", "low"])
    ]
    rows = list(OutboxMessage.objects.order_by("id"))
    _relay([row for row in rows if str(row.job_id) != ids[0]])  # ids[0] never reaches Redis
    Job.objects.filter(id=ids[0]).update(enqueued_at=timezone.now() - timedelta(seconds=600))
    Job.objects.filter(id=ids[2]).update(enqueued_at=timezone.now() - timedelta(seconds=300))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")

    exact = staff_api.get("/api/stats/").json()
    monkeypatch.setattr(engine_stats, "EXACT_COUNT_LIMIT", 2)
    estimated = staff_api.get("/api/stats/").json()

    assert exact["estimated"] == [] and exact["jobs"]["by_status"]["queued"] == 3
    assert 600 <= exact["oldest_queued_age_seconds"] < 660
    assert estimated["estimated"] == ["jobs.by_status.queued", "oldest_queued_age_seconds"]
    assert estimated["jobs"]["by_status"]["queued"] == 3  # the planner's figure, fresh after ANALYZE
    # The low tier's head in Redis is ids[2]: ids[0], missing from Redis, is not seen.
    assert 300 <= estimated["oldest_queued_age_seconds"] < 360


@pytest.mark.django_db
def test_a_head_in_redis_that_names_no_job_is_left_out_of_the_oldest_due_lookup(
    api, staff_api, monkeypatch, two_queues
):
    """A FIFO list's head may be a value that names no job: garbage, or for a moment the
    marker of the reconciler's rebuild (broker/fifo_prune.py) once the workers popped every
    id in front of it."""
    job, *_ = [submit(api, payload={"n": n}).json()["id"] for n in range(3)]
    _relay(OutboxMessage.objects.all())
    Job.objects.filter(id=job).update(enqueued_at=timezone.now() - timedelta(seconds=300))
    broker.get_client().rpush(broker.fifo_key("bulk"), "reconcile-marker:0123456789abcdef")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")
    monkeypatch.setattr(engine_stats, "EXACT_COUNT_LIMIT", 0)

    response = staff_api.get("/api/stats/")

    assert response.status_code == 200, response.content
    assert "oldest_queued_age_seconds" in response.json()["estimated"]
    assert 300 <= response.json()["oldest_queued_age_seconds"] < 360


@pytest.mark.django_db
def test_a_scheduled_job_is_not_counted_as_waiting(api, staff_api):
    submit(api, delay_seconds=600)

    assert staff_api.get("/api/stats/").json()["oldest_queued_age_seconds"] is None


@pytest.mark.django_db
def test_stats_are_for_staff_only(api, client):
    assert api.get("/api/stats/").status_code == 403
    assert client.get("/api/stats/").status_code == 401


@pytest.mark.django_db
def test_stats_still_answer_when_redis_does_not(staff_api, settings, monkeypatch):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    monkeypatch.setattr(broker.client, "_client", None)  # the next get_client() uses the new URL

    response = staff_api.get("/api/stats/")

    assert response.status_code == 200
    assert response.json()["redis"] is None
    assert "ConnectionError" in response.json()["redis_error"]
    assert response.json()["jobs"]["total"] == 0


@pytest.mark.django_db
def test_health_is_200_without_authentication(client):
    response = client.get("/api/health/", HTTP_AUTHORIZATION="Token not-a-real-token")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"postgresql": "ok", "redis": "ok"}}


@pytest.mark.django_db
def test_health_is_503_naming_redis_when_it_does_not_answer(client, staff_api, settings):
    port = closed_port()
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"

    anonymous = client.get("/api/health/")
    staff = staff_api.get("/api/health/")

    assert anonymous.status_code == staff.status_code == 503
    body = anonymous.json()
    assert body["status"] == "unavailable" and body["detail"] == "redis not answering"
    # Anonymous callers learn which store is down, not its address or the error.
    assert body["checks"] == {"postgresql": "ok", "redis": "unavailable"}
    assert str(port) not in anonymous.content.decode()
    detail = staff.json()["checks"]["redis"]
    assert "Connection refused" in detail or "Error" in detail


@pytest.mark.django_db
def test_health_shows_no_details_to_a_user_who_is_not_staff(api, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"

    assert api.get("/api/health/").json()["checks"]["redis"] == "unavailable"


def test_health_is_503_naming_postgresql_when_it_does_not_answer():
    result = run_in_child(
        """
        response = client.get("/api/health/")
        print(json.dumps({"status": response.status_code, "body": response.json()}))
        """,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/jobs",
        DATABASE_POOL_TIMEOUT="2",
    )

    assert result["status"] == 503
    assert result["body"]["detail"] == "postgresql not answering"
    assert result["body"]["checks"] == {"postgresql": "unavailable", "redis": "ok"}


def test_health_with_a_token_that_a_down_postgresql_cannot_check_still_names_the_store():
    result = run_in_child(
        """
        client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")
        response = client.get("/api/health/")
        print(json.dumps({"status": response.status_code, "body": response.json()}))
        """,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/jobs",
        DATABASE_POOL_TIMEOUT="1",
    )

    assert result["status"] == 503
    assert result["body"] == {
        "status": "unavailable",
        "detail": "postgresql not answering",
        "checks": {"postgresql": "unavailable", "redis": "ok"},
    }


def test_health_answers_before_the_pool_gives_up_on_a_down_postgresql():
    # The pool would wait its whole timeout (30 s here) for a connection; the probe does not,
    # and neither does the process's exit (which joins the check's thread).
    started = time.monotonic()
    result = run_in_child(
        """
        import time
        started = time.monotonic()
        response = client.get("/api/health/")
        print(json.dumps({"status": response.status_code, "seconds": time.monotonic() - started}))
        """,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/jobs",
        DATABASE_POOL_TIMEOUT="30",
    )

    assert result["status"] == 503
    assert result["seconds"] < 15
    assert time.monotonic() - started < 15


@pytest.mark.django_db
def test_health_is_200_without_a_connection_pool():
    # The test database: the environment's may not exist where the suite runs.
    result = run_in_child(
        """
        response = client.get("/api/health/")
        print(json.dumps({"status": response.status_code, "body": response.json()}))
        """,
        DATABASE_URL=database_url(),
        DATABASE_POOL="0",
    )

    assert result == {"status": 200, "body": {"status": "ok", "checks": {"postgresql": "ok", "redis": "ok"}}}


@pytest.mark.parametrize("pool", ["1", "0"])
def test_health_answers_when_postgresql_accepts_connections_and_never_replies(pool):
    # A hung server (or a host whose packets vanish): TCP connects, the server's answer
    # never comes. Without a connect timeout libpq waits for ever, and so would the
    # process's exit, which joins the check's thread.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshakes; nothing ever reads
        started = time.monotonic()
        result = run_in_child(
            """
            import time
            started = time.monotonic()
            response = client.get("/api/health/")
            print(json.dumps({"status": response.status_code, "body": response.json(),
                              "seconds": time.monotonic() - started}))
            """,
            DATABASE_URL=f"postgres://postgres@127.0.0.1:{silent.getsockname()[1]}/jobs",
            DATABASE_POOL=pool,
            DATABASE_POOL_TIMEOUT="30",
        )

    assert result["status"] == 503
    assert result["body"]["checks"]["postgresql"] == "unavailable"
    assert result["seconds"] < 15
    assert time.monotonic() - started < 15


def test_a_request_during_a_postgres_outage_is_a_503_with_retry_after():
    result = run_in_child(
        """
        client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")
        response = client.post("/api/jobs/", {"type": "demo.echo"}, format="json")
        print(json.dumps({"status": response.status_code, "body": response.json(),
                          "retry_after": response.get("Retry-After")}))
        """,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/jobs",
        DATABASE_POOL_TIMEOUT="1",
    )

    assert result["status"] == 503 and result["retry_after"] == "5"
    assert result["body"]["code"] == "store_unavailable"
