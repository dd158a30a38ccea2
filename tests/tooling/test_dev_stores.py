"""./dev psql and ./dev redis-cli reach the embedded servers; ./dev stop stops them (and nothing else)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import PROJECT_ROOT


def dev(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    # A data folder of this test's own: the servers it starts are the ones it stops.
    env = {name: value for name, value in os.environ.items() if name not in ("DATABASE_URL", "REDIS_URL")}
    env.update(JOBSITE_DATA_DIR=str(data_dir), JOBSITE_ENV_FILE="")
    return subprocess.run(
        [str(PROJECT_ROOT / "dev"), *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().split()[0]), 0)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return False
    return True


def test_psql_redis_cli_and_stop_on_the_embedded_servers(tmp_path):
    data = tmp_path / "data"
    try:
        psql = dev(data, "psql", "-tA", "-c", "SELECT 40 + 2")
        assert psql.returncode == 0, psql.stderr
        assert psql.stdout.strip() == "42"
        redis = dev(data, "redis-cli", "ping")
        assert (redis.returncode, redis.stdout.strip()) == (0, "PONG"), redis.stderr
        pids = [data / "postgres" / "postmaster.pid", data / "redis" / "redis.pid"]
        assert all(alive(pid) for pid in pids)
        # Still running after the command that started them ended: they outlive it.
        stop = dev(data, "stop")
        assert stop.returncode == 0, stop.stderr
        assert "Stopped PostgreSQL" in stop.stdout and "Redis" in stop.stdout
        assert not any(alive(pid) for pid in pids)
        again = dev(data, "stop")
        assert "No embedded server was running" in again.stdout
    finally:
        dev(data, "stop")
