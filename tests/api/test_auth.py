"""Authentication everywhere but health and the schema; token and session both work; throttling."""

import io
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.shortcuts import resolve_url
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.api.conftest import make_user, post_json, run_in_child, submit
from tests.helpers import database_url

# Failed authentications and throttles count in the Redis cache.
pytestmark = pytest.mark.redis

JOB = "/api/jobs/00000000-0000-0000-0000-000000000000"
PROTECTED = [
    ("get", "/api/jobs/"),
    ("post", "/api/jobs/"),
    ("post", "/api/jobs/bulk/"),
    ("get", f"{JOB}/"),
    ("get", f"{JOB}/logs/"),
    ("post", f"{JOB}/cancel/"),
    ("post", f"{JOB}/retry/"),
    ("get", "/api/stats/"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("method, url", PROTECTED)
def test_every_job_endpoint_needs_credentials(method, url):
    client = APIClient()
    body = {"data": "{}", "content_type": "application/json"} if method == "post" else {}

    anonymous = getattr(client, method)(url, **body)
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")
    bad_token = getattr(client, method)(url, **body)

    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "not_authenticated"
    assert anonymous["WWW-Authenticate"] == "Token"
    assert (bad_token.status_code, bad_token.json()["code"]) == (401, "authentication_failed")


@pytest.mark.django_db
@pytest.mark.redis  # health pings Redis
def test_health_and_the_schema_need_none(client):
    assert client.get("/api/health/").status_code == 200
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/schema/", HTTP_AUTHORIZATION="Token wrong").status_code == 200


@pytest.mark.django_db
def test_a_token_from_drf_create_token_authenticates():
    make_user("carol")
    out = io.StringIO()
    call_command("drf_create_token", "carol", stdout=out)
    key = re.search(r"Generated token (\w+) for user carol", out.getvalue()).group(1)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    response = submit(client)

    assert response.status_code == 201
    assert Token.objects.get(key=key).user.username == "carol"


@pytest.mark.django_db
def test_session_authentication_with_csrf():
    make_user("dave")
    browser = Client(enforce_csrf_checks=True)
    login_page = browser.get("/api/auth/login/")
    csrf = browser.cookies["csrftoken"].value
    logged_in = browser.post(
        "/api/auth/login/", {"username": "dave", "password": "pw-dave", "csrfmiddlewaretoken": csrf}
    )
    assert login_page.status_code == 200 and logged_in.status_code == 302
    csrf = browser.cookies["csrftoken"].value

    listed = browser.get("/api/jobs/")
    without_csrf = post_json(browser, "/api/jobs/", {"type": "demo.echo"})
    with_csrf = post_json(browser, "/api/jobs/", {"type": "demo.echo"}, HTTP_X_CSRFTOKEN=csrf)

    assert listed.status_code == 200
    assert without_csrf.status_code == 403 and "CSRF" in without_csrf.json()["detail"]
    assert with_csrf.status_code == 201
    assert with_csrf.json()["id"] in [job["id"] for job in browser.get("/api/jobs/").json()["results"]]


@pytest.mark.django_db
def test_throttling_is_off_by_default(api):
    assert {api.get("/api/jobs/").status_code for _ in range(30)} == {200}


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis  # throttle counters live in the Redis cache
def test_throttling_follows_the_environment():
    token = Token.objects.create(user=make_user("eve"))

    result = run_in_child(
        """
        import os
        client.credentials(HTTP_AUTHORIZATION="Token " + os.environ["TEST_TOKEN"])
        user = [client.get("/api/jobs/") for _ in range(3)]
        anonymous = APIClient()
        schema = [anonymous.get("/api/schema/").status_code for _ in range(2)]
        health = [anonymous.get("/api/health/").status_code for _ in range(3)]
        print(json.dumps({
            "user": [r.status_code for r in user],
            "code": user[-1].json()["code"],
            "retry_after": user[-1].get("Retry-After"),
            "schema": schema,
            "health": health,
        }))
        """,
        DATABASE_URL=database_url(),
        API_THROTTLE_USER="2/minute",
        API_THROTTLE_ANON="1/minute",
        TEST_TOKEN=token.key,
    )

    assert result["user"] == [200, 200, 429]
    assert result["code"] == "throttled"
    assert 0 < int(result["retry_after"]) <= 60
    assert result["schema"] == [200, 429]
    assert result["health"] == [200, 200, 200]  # probes are never throttled
    assert User.objects.filter(username="eve").exists()


def _anonymous_schema_statuses(forwarded_for: list[str], **env: str) -> list[int]:
    return run_in_child(
        f"""
        statuses = [
            APIClient().get("/api/schema/", HTTP_X_FORWARDED_FOR=address).status_code
            for address in {forwarded_for!r}
        ]
        print(json.dumps(statuses))
        """,
        DATABASE_URL=database_url(),
        API_THROTTLE_ANON="1/minute",
        **env,
    )


@pytest.mark.django_db(transaction=True)
def test_a_forged_forwarded_for_does_not_dodge_the_throttle():
    # Each request claims another client; without a trusted proxy they are all 127.0.0.1.
    assert _anonymous_schema_statuses(["198.51.100.1", "198.51.100.2", "198.51.100.3"]) == [200, 429, 429]


@pytest.mark.django_db(transaction=True)
def test_behind_one_proxy_the_address_it_appended_identifies_the_client():
    # The proxy appends the address it saw; whatever the client wrote before it is ignored.
    statuses = _anonymous_schema_statuses(
        ["1.1.1.1, 198.51.100.1", "2.2.2.2, 198.51.100.1", "3.3.3.3, 198.51.100.2"], NUM_PROXIES="1"
    )
    assert statuses == [200, 429, 200]


@pytest.mark.django_db
@pytest.mark.parametrize("login", ["/api/auth/login/", "/admin/login/"])
def test_a_login_without_next_lands_on_a_page_that_exists(login):
    """Django's LoginView sends a login without ``next`` to LOGIN_REDIRECT_URL, by default
    /accounts/profile/, which this project does not serve (a 404 after a successful login).
    It lands on the API's docs, a page for any user. (The admin's own form carries
    ``next=/admin/``, so a login through it still lands on the admin.)"""
    make_user("erin", staff=True)
    browser = Client()
    logged_in = browser.post(login, {"username": "erin", "password": "pw-erin"})
    assert logged_in.status_code == 302
    assert logged_in["Location"] == "/api/docs/"
    assert browser.get("/api/docs/").status_code == 200


@pytest.mark.django_db
def test_the_login_url_is_a_login_page_the_project_serves(settings):
    """LOGIN_URL (where login_required sends a visitor) defaults to /accounts/login/: a 404 here."""
    page = Client().get(resolve_url(settings.LOGIN_URL))
    assert page.status_code == 200
    assert b'name="password"' in page.content
