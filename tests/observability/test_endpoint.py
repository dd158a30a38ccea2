"""GET /metrics: who may read it, and the gauges read from both stores at scrape time."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from queue_app.observability.metrics import MULTIPROC_ENV
from queue_app.services import enqueue_job
from tests.helpers import relay_all
from tests.observability.support import parse, sample

pytestmark = [pytest.mark.django_db]

TOKEN = "scrape-secret-token"


@pytest.fixture(autouse=True)
def _token(queue_config, monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    queue_config(METRICS_TOKEN=TOKEN)


def logged_in(*permissions: str) -> Client:
    user = get_user_model().objects.create_user("reader", password="pw")
    user.user_permissions.set(Permission.objects.filter(codename__in=permissions))
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_gets_401_with_a_bearer_challenge():
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["code"] == "not_authenticated"


def test_a_wrong_token_gets_401():
    response = Client().get("/metrics", headers={"Authorization": "Bearer not-it"})
    assert response.status_code == 401


def test_no_token_configured_means_no_token_is_accepted(queue_config):
    queue_config(METRICS_TOKEN="")
    assert Client().get("/metrics", headers={"Authorization": "Bearer "}).status_code == 401


def test_a_user_without_view_job_gets_403():
    response = logged_in().get("/metrics")
    assert response.status_code == 403
    assert "queue_app.view_job" in response.json()["detail"]


def test_a_user_with_view_job_reads_it():
    response = logged_in("view_job").get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b"jobqueue_postgresql_up 1.0" in response.content


@pytest.mark.redis
def test_the_token_reads_gauges_that_match_both_stores(relay_path):
    for n in range(3):
        enqueue_job("demo.echo", {"n": n})
    enqueue_job("demo.echo", {"n": 9}, priority="high")
    scraped = parse(Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode())
    assert sample(scraped, "jobqueue_jobs", queue="default", status="queued") == 4
    assert sample(scraped, "jobqueue_outbox_backlog", queue="default") == 4
    assert sample(scraped, "jobqueue_outbox_oldest_age_seconds", queue="default") >= 0
    assert sample(scraped, "jobqueue_redis_ids", queue="default", structure="priority") == 0
    relay_all()
    scraped = parse(Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode())
    assert sample(scraped, "jobqueue_outbox_backlog", queue="default") == 0
    assert sample(scraped, "jobqueue_redis_ids", queue="default", structure="priority") == 4
    assert sample(scraped, "jobqueue_redis_up") == 1
