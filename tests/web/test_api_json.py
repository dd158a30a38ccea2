"""Every /api/ answer is JSON in the documented error shape, through the real server with DEBUG off.

Django answers some requests before any API view runs: an unknown path, a
path missing its final slash (APPEND_SLASH's redirect), a CSRF failure; and
DRF renders HTML for ``Accept: text/html`` when the browsable API is on.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from queue_app.models import Job
from tests.web.conftest import request
from tests.web.server import PRODUCTION_ENV, running

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def session_cookie(user, settings) -> str:
    # Signed with the server's key, so the server accepts the session.
    settings.SECRET_KEY = PRODUCTION_ENV["SECRET_KEY"]
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def error_shape(response, content: bytes) -> dict:
    assert response.getheader("Content-Type", "").startswith("application/json"), response.getheaders()
    body = json.loads(content)
    assert isinstance(body["code"], str) and isinstance(body["detail"], str), body
    return body


def test_api_root_is_a_json_index(production_port):
    response, content = request(production_port, "GET", "/api/")
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json"
    assert json.loads(content)["jobs"].endswith("/api/jobs/")


def test_unknown_path_is_a_json_404(production_port):
    response, content = request(production_port, "GET", "/api/nothing")
    assert response.status == 404
    assert error_shape(response, content)["code"] == "not_found"


def test_missing_slash_is_a_json_308_that_keeps_the_post(production_port, token):
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    response, content = request(production_port, "GET", "/api/jobs?status=queued", **headers)
    assert response.status == 308
    assert response.getheader("Location") == "/api/jobs/?status=queued"
    assert error_shape(response, content)["code"] == "append_slash"

    body = json.dumps({"type": "demo.echo", "payload": {}}).encode()
    response, content = request(production_port, "POST", "/api/jobs", body, **headers)
    assert (response.status, response.getheader("Location")) == (308, "/api/jobs/")
    assert error_shape(response, content)["code"] == "append_slash"
    # Following it (as a client does for a 308: same method and body) creates the job.
    response, content = request(production_port, "POST", "/api/jobs/", body, **headers)
    assert response.status == 201
    assert Job.objects.count() == 1


def test_csrf_failures_are_json(production_port, session_cookie):
    # A session without its CSRF token: on an unknown path, the 404; on the login form, a 403.
    response, content = request(production_port, "POST", "/api/nothing/", b"{}", Cookie=session_cookie)
    assert response.status == 404
    assert error_shape(response, content)["code"] == "not_found"
    response, content = request(production_port, "POST", "/api/auth/login/", b"username=x&password=y")
    assert response.status == 403
    assert error_shape(response, content)["code"] == "csrf_failed"
    # Through DRF's session authentication too.
    response, content = request(production_port, "POST", "/api/jobs/", b"{}", Cookie=session_cookie)
    assert response.status == 403
    assert error_shape(response, content)["detail"].startswith("CSRF Failed")


def test_accept_text_html_gets_json_without_debug(production_port, token):
    headers = {"Authorization": f"Token {token}", "Accept": "text/html"}
    response, content = request(production_port, "GET", "/api/jobs/", **headers)
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json"
    assert json.loads(content)["results"] == []
    response, content = request(production_port, "GET", "/api/jobs/", Accept="text/html")
    assert response.status == 401
    assert error_shape(response, content)["code"] == "not_authenticated"


def test_browsable_api_only_with_debug(token):
    headers = {"Authorization": f"Token {token}", "Accept": "text/html"}
    with running("runweb", DEBUG="1") as port:
        response, content = request(port, "GET", "/api/jobs/", **headers)
    assert response.status == 200
    assert response.getheader("Content-Type").startswith("text/html")
    assert b"Django REST framework" in content


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [("/api/%0A", 404, "not_found"), ("/api/x%0Ay/", 404, "not_found"), ("/api/jobs/%0A", 404, "not_found")],
)
def test_a_path_with_a_newline_is_answered_in_json(production_port, path, status, code):
    response, content = request(production_port, "GET", path)
    assert response.status == status
    assert error_shape(response, content)["code"] == code


def test_too_many_query_parameters_is_a_json_400(production_port, token):
    # Django refuses more than DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) parameters.
    path = "/api/jobs/?" + "&".join(["p"] * 1001)
    response, content = request(production_port, "GET", path, Authorization=f"Token {token}")
    assert response.status == 400
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in error_shape(response, content)["detail"]


def test_the_docs_page_answers_get_and_refuses_other_methods(production_port):
    assert request(production_port, "GET", "/api/docs/")[0].status == 200
    assert request(production_port, "HEAD", "/api/docs/")[0].status == 200
    for method in ["OPTIONS", "POST", "DELETE"]:
        response, content = request(production_port, method, "/api/docs/")
        assert response.status == 405, (method, content[:300])
