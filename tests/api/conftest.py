"""Users, token-authenticated clients and small request helpers for the API tests."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from queue_app.models import Job, JobLog, OutboxMessage
from tests.helpers import PROJECT_ROOT, python_json


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
    """An operator: staff with the job permissions (see or act on every user's jobs)."""
    user = make_user("operator", staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "change_job"]))
    return user


@pytest.fixture
def bare_staff(db):
    """Staff without any queue_app permission: no more than any user in the API."""
    return make_user("bare-staff", staff=True)


@pytest.fixture
def viewer(db):
    user = make_user("viewer", staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    return user


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


# Runs in a child process: Django set up from the environment, then one test client.
CHILD_PRELUDE = """
import json, sys
import django
django.setup()
from django.test.utils import setup_test_environment
setup_test_environment()
from rest_framework.test import APIClient
client = APIClient()
"""


def run_in_child(script: str, **env: str) -> dict:
    """Run ``script`` (after CHILD_PRELUDE) in a fresh interpreter; it prints one JSON object.

    A child reads its settings from the environment at start-up, which is how
    throttle rates and store URLs are really configured.
    """
    child_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(PROJECT_ROOT),
        **env,
    }
    return python_json(["-c", CHILD_PRELUDE + textwrap.dedent(script)], child_env)


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
