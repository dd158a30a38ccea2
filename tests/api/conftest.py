"""Users, token-authenticated clients and small request helpers for the API tests."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from queue_app.models import Job, JobLog, OutboxMessage


def make_user(username: str, *, staff: bool = False):
    return get_user_model().objects.create_user(username, password="pw-" + username, is_staff=staff)


def token_client(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def alice(db):
    return make_user("alice")


@pytest.fixture
def bob(db):
    return make_user("bob")


@pytest.fixture
def staff(db):
    return make_user("operator", staff=True)


@pytest.fixture
def api(alice) -> APIClient:
    """Alice's client (token authentication)."""
    return token_client(alice)


@pytest.fixture
def bob_api(bob) -> APIClient:
    return token_client(bob)


@pytest.fixture
def staff_api(staff) -> APIClient:
    return token_client(staff)


def post_json(client: APIClient, url: str, body: Any, **extra: Any):
    """POST ``body`` encoded as JSON (a str is sent as the raw body)."""
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **extra)


def submit(client: APIClient, **body: Any):
    body.setdefault("type", "demo.echo")
    return post_json(client, "/api/jobs/", body)


def rows_written() -> tuple[int, int, int]:
    """(jobs, log rows, outbox rows): all zero when a rejected request wrote nothing."""
    return Job.objects.count(), JobLog.objects.count(), OutboxMessage.objects.count()
