"""HTTP submit: ``POST /api/jobs/`` from keep-alive clients against ``manage.py runweb``.

The production server command (gunicorn with jobsite/gunicorn_conf.py: threaded
workers, which keep connections alive), sized by its settings to 2 processes x 4
threads for 8 clients.

    python ours_http.py <requests> [clients]

prints {"http_submit": requests per second, ...} as JSON on its last line.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
import time

from common import OURS_TREE, python, spawn, stop_all, wait_until
from ours import environment, reset_stores, setup_django, table

SERVER_PROCESSES = 2
THREADS_PER_PROCESS = 4


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/api/health/")
        return connection.getresponse().status == 200
    except OSError:
        return False


def submit(port: int, token: str, args: range, failures: list[str]) -> None:
    """One keep-alive client: POST each job, expect 201."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    for arg in args:
        connection.request(
            "POST", "/api/jobs/", json.dumps({"type": "bench.noop", "payload": {"n": arg}}), headers
        )
        response = connection.getresponse()
        body = response.read()
        if response.status != 201:
            failures.append(f"{response.status}: {body[:200]!r}")
            return
    connection.close()


def main() -> None:
    requests, clients = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8
    setup_django()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from rest_framework.authtoken.models import Token

    reset_stores()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    token, _ = Token.objects.get_or_create(user=user)
    port = free_port()
    # The production server command, sized by its settings as a deployment would be.
    server_env = {
        **environment(),
        "WEB_WORKERS": str(SERVER_PROCESSES),
        "WEB_THREADS": str(THREADS_PER_PROCESS),
        "WEB_KEEPALIVE": "30",
    }
    command = [python(), "manage.py", "runweb", f"--bind=127.0.0.1:{port}"]
    server = spawn(command, server_env, "gunicorn", cwd=OURS_TREE)
    failures: list[str] = []
    try:
        wait_until(lambda: healthy(port), timeout=60, what="gunicorn to answer /api/health/")
        submit(port, token.key, range(-clients, 0), failures)  # warm both processes' connections
        shares = [range(index, requests, clients) for index in range(clients)]
        threads = [
            threading.Thread(target=submit, args=(port, token.key, share, failures)) for share in shares
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
    finally:
        stop_all([server])
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {table('jobs')} WHERE payload->>'n' >= '0' AND (payload->>'n')::int >= 0"
        )
        created = cursor.fetchone()[0]
    if created != requests:
        raise SystemExit(f"{created} jobs exist after {requests} accepted requests")
    print(json.dumps({"http_submit": requests / seconds, "requests": requests, "clients": clients}))


if __name__ == "__main__":
    main()
