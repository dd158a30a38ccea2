"""./dev installs requirements only when they changed, not on every switch between up and test."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PROJECT_ROOT

# Stands in for the virtualenv's interpreter: answers the version check, logs every other call.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-c" ]; then exit 0; fi
echo "$*" >> "$(dirname "$0")/../calls.log"
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PROJECT_ROOT / "dev", project / "dev")
    (project / "requirements.txt").write_text("Django\n")
    (project / "requirements-dev.txt").write_text("-r requirements.txt\npytest\n")
    python = project / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    for tool in ("ruff", "mkdocs"):
        (python.parent / tool).symlink_to(python)
    return project


def _dev(project: Path, *args: str) -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin", "DEBUG": "1"}
    subprocess.run([str(project / "dev"), *args], cwd=project, env=env, check=True, capture_output=True)


def _installs(project: Path) -> list[str]:
    calls = (project / ".venv" / "calls.log").read_text().splitlines()
    return [call for call in calls if call.startswith("-m pip install") and "-r" in call.split()]


def test_switching_between_test_and_up_installs_once(tmp_path):
    project = _project(tmp_path)
    _dev(project, "setup")  # what ./dev test installs
    _dev(project, "up")
    _dev(project, "setup")
    _dev(project, "up")
    assert _installs(project) == [
        "-m pip install --quiet --disable-pip-version-check -r requirements-dev.txt"
    ]


def test_up_first_then_test_installs_the_test_tools_then_nothing_more(tmp_path):
    project = _project(tmp_path)
    _dev(project, "up")
    _dev(project, "setup")
    _dev(project, "up")
    _dev(project, "setup")
    assert [call.split()[-1] for call in _installs(project)] == ["requirements.txt", "requirements-dev.txt"]


def test_a_changed_requirements_file_installs_again(tmp_path):
    project = _project(tmp_path)
    _dev(project, "setup")
    (project / "requirements.txt").write_text("Django\ngunicorn\n")
    _dev(project, "up")
    assert [call.split()[-1] for call in _installs(project)] == ["requirements-dev.txt", "requirements.txt"]


def test_env_writes_what_up_writes_without_starting_anything(tmp_path):
    project = _project(tmp_path)
    env = {name: value for name, value in os.environ.items() if name not in ("DEBUG", "JOBSITE_ENV_FILE")}
    env.update(PATH="/usr/bin:/bin", DATABASE_URL="postgres://db.example/jobs")
    subprocess.run([str(project / "dev"), "env"], cwd=project, env={**env, "REDIS_URL": ""}, check=True)
    written = dict(
        line.split("=", 1) for line in (project / ".env").read_text().splitlines() if not line.startswith("#")
    )
    # As ./dev up writes it: a key, DEBUG on unless the environment says otherwise, the given URLs.
    assert set(written) == {"SECRET_KEY", "DEBUG", "DATABASE_URL"}
    assert written["DEBUG"] == "1" and written["DATABASE_URL"] == "postgres://db.example/jobs"
    assert len(written["SECRET_KEY"]) >= 50
    assert not (project / ".venv" / "calls.log").exists()  # nothing installed, migrated or run


@pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists()
    or not shutil.which("pgbouncer", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"])),
    reason="./dev test would install Chromium and PgBouncer first (root + apt)",
)
def test_test_builds_the_docs_strictly_after_the_lint_and_before_pytest(tmp_path):
    project = _project(tmp_path)
    _dev(project, "test", "-k", "anything")
    calls = [call for call in (project / ".venv" / "calls.log").read_text().splitlines() if "pip" not in call]
    assert calls == [
        "check .",
        "format --check .",
        "build --strict --quiet",
        "manage.py makemigrations --check --dry-run",
        "-m pytest -k anything",
    ]
