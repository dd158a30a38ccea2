"""Content-Security-Policy (Django's own) and Permissions-Policy on the admin, the dashboard and the API
docs, through the real server with DEBUG off; and ``check --deploy`` stays clean with CI's settings."""

from __future__ import annotations

import re
import subprocess

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.helpers import child_env, manage
from tests.web.conftest import request
from tests.web.server import PRODUCTION_ENV

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def staff_cookie(settings) -> str:
    settings.SECRET_KEY = PRODUCTION_ENV["SECRET_KEY"]  # the server's key signs the session
    user = get_user_model().objects.create_superuser("csp-admin", "csp@example.com", "unused-password")
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def policy(response) -> dict[str, list[str]]:
    header = response.getheader("Content-Security-Policy")
    assert header, response.getheaders()
    return {name: values for name, *values in (part.split() for part in header.split(";"))}


def nonce_of(directives: dict[str, list[str]], directive: str) -> str:
    (nonce,) = [value for value in directives[directive] if value.startswith("'nonce-")]
    return nonce.removeprefix("'nonce-").removesuffix("'")


@pytest.mark.parametrize(
    ("path", "signed_in"),
    [("/admin/login/", False), ("/admin/", True), ("/admin/queue_app/job/", True), ("/api/docs/", False)],
)
def test_pages_carry_the_policy_and_the_permissions_policy(production_port, staff_cookie, path, signed_in):
    response, _ = request(production_port, "GET", path, **({"Cookie": staff_cookie} if signed_in else {}))
    assert response.status == 200
    directives = policy(response)
    assert directives["default-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in directives["script-src"] + directives["style-src"]
    assert "camera=()" in response.getheader("Permissions-Policy")


def test_dashboard_script_carries_the_nonce_of_its_response(production_port, staff_cookie):
    seen = set()
    for _ in range(2):
        response, content = request(
            production_port, "GET", "/admin/queue_app/job/dashboard/", Cookie=staff_cookie
        )
        assert response.status == 200
        nonce = nonce_of(policy(response), "script-src")
        assert re.search(rf'<script src="[^"]*dashboard\.js" nonce="{re.escape(nonce)}"', content.decode())
        seen.add(nonce)
    assert len(seen) == 2  # a fresh nonce per response


def test_api_docs_have_no_inline_script_and_a_nonced_style(production_port):
    response, content = request(production_port, "GET", "/api/docs/")
    html = content.decode()
    assert not re.search(r"<script>(?!</script>)", html)
    assert "/api/docs/?script=" in html
    assert f'<style nonce="{nonce_of(policy(response), "style-src")}">' in html
    script, body = request(production_port, "GET", "/api/docs/?script=")
    assert script.status == 200
    assert b"SwaggerUIBundle" in body


def test_check_deploy_is_clean_with_the_ci_settings():
    """The environment .ci/run's "Deployment checks" step gives."""
    env = child_env(
        DEBUG="0",
        SECRET_KEY="ci-secret-key-that-is-long-enough-to-pass-the-deploy-checks-0123456789",
        ALLOWED_HOSTS="jobs.example.com",
        SECURE_HSTS_PRELOAD="1",
        DJANGO_SETTINGS_MODULE="jobsite.settings",
    )
    process = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output.decode()
    assert b"no issues" in output
