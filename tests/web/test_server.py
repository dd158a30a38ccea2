"""The real web server over HTTP: gunicorn with keep-alive, and bodies shorter than declared."""

from __future__ import annotations

import http.client
import json
import socket

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from queue_app.models import Job
from tests.helpers import wait_until
from tests.web.server import running

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def token() -> str:
    user = get_user_model().objects.create_user("web-user", password="unused-password")
    return Token.objects.create(user=user).key


@pytest.fixture(scope="module")
def web_port(django_db_setup, django_db_blocker) -> int:
    # Its tests leave Redis alone: jobs wait in the outbox (see tests/conftest.py).
    with django_db_blocker.unblock(), running("runweb", JOBQUEUE_DISPATCH_ON_COMMIT="0") as port:
        yield port


def post_job(connection: http.client.HTTPConnection, token: str, body: dict) -> http.client.HTTPResponse:
    connection.request(
        "POST",
        "/api/jobs/",
        body=json.dumps(body),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    response = connection.getresponse()
    response.read()
    return response


def test_served_by_gunicorn_with_keep_alive(web_port, token):
    connection = http.client.HTTPConnection("127.0.0.1", web_port, timeout=10)
    first = post_job(connection, token, {"type": "demo.echo", "payload": {"n": 1}})
    sock = connection.sock
    second = post_job(connection, token, {"type": "demo.echo", "payload": {"n": 2}})
    assert (first.status, second.status) == (201, 201)
    assert first.getheader("Server", "").startswith("gunicorn")
    # The second request went over the first one's connection: it was kept alive.
    assert sock is not None and connection.sock is sock
    assert first.getheader("Connection", "").lower() != "close"
    connection.close()
    assert Job.objects.count() == 2


def test_body_shorter_than_its_content_length_creates_no_job(web_port, token):
    body = json.dumps({"type": "demo.echo", "payload": {}}).encode()
    head = (
        "POST /api/jobs/ HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{web_port}\r\n"
        f"Authorization: Token {token}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body) + 40}\r\n"
        "\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", web_port), timeout=30) as sock:
        # What arrives is complete JSON; then the client stops sending.
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status_line = reply.split(b"\r\n", 1)[0]
    assert status_line.split()[1] == b"400", reply[:500]
    assert b"Content-Length" in reply.split(b"\r\n\r\n", 1)[1]
    assert Job.objects.count() == 0


def test_runsystem_serves_the_api_and_runs_the_job(token):
    with running("runsystem", "--concurrency=1", "--no-admin-user", timeout=120) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        response = post_job(connection, token, {"type": "demo.echo", "payload": {"via": "runsystem"}})
        assert response.status == 201
        assert response.getheader("Server", "").startswith("gunicorn")
        job = Job.objects.get()
        wait_until(lambda: Job.objects.filter(pk=job.pk, status="completed").exists(), timeout=60)
        assert Job.objects.get(pk=job.pk).result == {"via": "runsystem"}
