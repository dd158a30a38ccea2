"""The console of ./dev up: Django's lines once each, a client's mistake without a
traceback, and no 404 for the favicon browsers ask for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import PROJECT_ROOT, child_env

SCRIPT = """
import django
django.setup()
from django.test import Client
client = Client()
assert client.get("/api/jobs/", HTTP_HOST="localhost", HTTP_ACCEPT="application/json").status_code == 401
assert client.get("/favicon.ico", HTTP_HOST="localhost").status_code == 301
assert client.get("/api/health/", HTTP_HOST="evil.example").status_code == 400
"""


def test_a_4xx_is_one_line_and_a_refused_host_has_no_traceback():
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        env=child_env(LOG_FORMAT="console"),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert sum("Unauthorized: /api/jobs/" in line for line in lines) == 1, lines
    assert sum("Invalid HTTP_HOST header: 'evil.example'" in line for line in lines) == 1, lines
    assert "Traceback" not in done.stderr, done.stderr
    assert not any("favicon" in line for line in lines), lines
