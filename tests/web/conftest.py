"""One production-like web server (``manage.py runweb``, DEBUG off) shared by the HTTP tests."""

from __future__ import annotations

import http.client
import json

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from tests.web.server import running


@pytest.fixture(scope="session")
def production_port(django_db_setup, django_db_blocker) -> int:
    # The tests sharing it leave Redis alone: their jobs wait in the outbox (see
    # tests/conftest.py), the server's as well.
    with django_db_blocker.unblock(), running("runweb", JOBQUEUE_DISPATCH_ON_COMMIT="0") as port:
        yield port


@pytest.fixture
def user():
    return get_user_model().objects.create_user("http-user", password="unused-password")


@pytest.fixture
def token(user) -> str:
    return Token.objects.create(user=user).key


def request(port: int, method: str, path: str, body: bytes | None = None, **headers: str):
    """(response, body bytes) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response, response.read()
    finally:
        connection.close()


def post_json(port: int, path: str, body, token: str):
    """(status, decoded JSON) of a token-authenticated POST."""
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    response, content = request(port, "POST", path, json.dumps(body).encode(), **headers)
    return response.status, json.loads(content)
