"""A second terminal just works: ./dev up leaves a .env that settings read; without a key, one line says
what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import PROJECT_ROOT
from tests.tooling.test_dev_script import _dev, _project

# No DEBUG, no SECRET_KEY, no store URLs: what a fresh terminal has.
STRIPPED = ("DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "JOBSITE_ENV_FILE")


def fresh_terminal(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in STRIPPED}
    return {**env, **extra}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def env_lines(path: Path) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    )


def test_missing_secret_key_is_one_line_that_says_what_to_do(tmp_path):
    result = manage("runworker", "--help", env=fresh_terminal(JOBSITE_ENV_FILE=str(tmp_path / "none")))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "SECRET_KEY" in line and "./dev up" in line and "DEBUG=1" in line


def test_up_writes_a_key_once_and_the_settings_it_ran_with(tmp_path):
    project = _project(tmp_path)
    without_stores = fresh_terminal(PATH="/usr/bin:/bin", DEBUG="1")
    for name in ("DATABASE_URL", "REDIS_URL"):
        without_stores.pop(name, None)
    subprocess.run(
        [str(project / "dev"), "up"], cwd=project, env=without_stores, check=True, capture_output=True
    )
    first = env_lines(project / ".env")
    assert len(first["SECRET_KEY"]) >= 50
    assert first["DEBUG"] == "1"
    assert "DATABASE_URL" not in first  # unset: every process finds the embedded servers
    assert oct((project / ".env").stat().st_mode & 0o777) == "0o600"
    _dev(project, "up")
    assert env_lines(project / ".env")["SECRET_KEY"] == first["SECRET_KEY"]


def test_up_keeps_the_store_urls_it_was_given(tmp_path):
    project = _project(tmp_path)
    env = {**os.environ, "PATH": "/usr/bin:/bin", "DATABASE_URL": "postgres://u@db:5432/jobs"}
    subprocess.run([str(project / "dev"), "env"], cwd=project, env=env, check=True, capture_output=True)
    assert env_lines(project / ".env")["DATABASE_URL"] == "postgres://u@db:5432/jobs"


def test_a_second_terminal_runs_commands_with_the_env_file(tmp_path):
    project = _project(tmp_path)
    _dev(project, "env")
    env_file = project / ".env"
    result = manage("runworker", "--help", env=fresh_terminal(JOBSITE_ENV_FILE=str(env_file)))
    assert result.returncode == 0, result.stderr
    assert "--queues" in result.stdout
    # The environment still wins over the file.
    env = fresh_terminal(JOBSITE_ENV_FILE=str(env_file), DEBUG="0", SECRET_KEY="")
    assert "SECRET_KEY is not set" in manage("check", env=env).stderr


def test_dev_manage_runs_any_command_with_the_env_file(tmp_path):
    project = _project(tmp_path)
    _dev(project, "env")
    _dev(project, "manage", "runworker", "--help")
    assert (project / ".venv" / "calls.log").read_text().splitlines()[-1] == "manage.py runworker --help"
