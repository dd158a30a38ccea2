"""Start the real web server command (gunicorn through ``manage.py runweb``) for a test."""

from __future__ import annotations

import http.client
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from tests.helpers import child_env, kill_group, manage, wait_until

# Production-like: DEBUG off, with the settings a deployment must give.
PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "test-secret-key-long-enough-for-the-deployment-checks-0123456789abcdef",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "0",
    "SESSION_COOKIE_SECURE": "0",
    "CSRF_COOKIE_SECURE": "0",
    "WEB_WORKERS": "1",
    "WEB_THREADS": "2",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/api/health/")
        return connection.getresponse().status in (200, 503)
    except OSError:
        return False
    finally:
        connection.close()


@contextmanager
def running(*command: str, timeout: float = 60, **env: str) -> Iterator[int]:
    """Run ``manage.py <command> --bind 127.0.0.1:<port>`` until the block ends; yields the port."""
    port = free_port()
    process = manage(
        *command,
        f"--bind=127.0.0.1:{port}",
        env=child_env(**{**PRODUCTION_ENV, **env}),
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: answers(port) or process.poll() is not None, timeout=timeout)
        assert process.poll() is None, f"{command} exited with {process.returncode}"
        yield port
    finally:
        kill_group(process)
