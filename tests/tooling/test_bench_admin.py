"""scripts/bench_admin.py, which backs the admin's figures at a million jobs (docs/how-to/admin.md),
runs end to end: a small seed into a database of its own, then every page timed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.helpers import PROJECT_ROOT

pytestmark = pytest.mark.redis


def _server_url(database: str) -> str:
    """A URL of ``database`` on the test database's server (a TCP address or a socket folder)."""
    params = connection.settings_dict
    host, port = params["HOST"] or "localhost", params["PORT"]
    if host.startswith("/"):
        socket = f"?host={quote(host, safe='')}" + (f"&port={port}" if port else "")
        return f"postgres://{params['USER']}@/{database}{socket}"
    return f"postgres://{params['USER']}@{host}:{port or 5432}/{database}"


def test_bench_admin_seeds_its_own_database_and_times_every_page():
    name = f"bench_admin_check_{os.getpid()}"
    env = {**os.environ, "DATABASE_URL": _server_url("postgres"), "REDIS_URL": settings.REDIS_URL}
    try:
        result = subprocess.run(
            [sys.executable, "scripts/bench_admin.py", "--jobs", "8000", "--repeat", "1", "--database", name],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert "seeded 8,000 jobs" in result.stdout
        rows = re.findall(r"^(.+?)\s+(\d+\.\d)\s+(\d+\.\d)\s+(\d+)$", result.stdout, re.M)
        pages = [label for label, *_ in rows]
        assert len(pages) == 19, result.stdout
        assert "api job list of a user owning 10 jobs" in pages
    finally:
        with psycopg.connect(_server_url("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
