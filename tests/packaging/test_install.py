"""The app installs into a fresh Django project from a wheel and runs a job end to end.

Follows the tutorial "Add it to your project" (docs/tutorials/add-to-your-project.md) literally:
its settings.py and urls.py blocks are appended to a new ``django-admin startproject``. The
throwaway virtualenv reads the dependencies from this interpreter's site-packages (a .pth
file), so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from psycopg import sql

from tests.helpers import PROJECT_ROOT

pytestmark = [pytest.mark.processes, pytest.mark.redis]

TUTORIAL = PROJECT_ROOT / "docs" / "tutorials" / "add-to-your-project.md"


def tutorial_block(first_line: str) -> str:
    """The fenced python block of the tutorial that starts with ``first_line``."""
    for block in re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), flags=re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"{TUTORIAL.name} has no python block starting {first_line!r}")


def run(*args, cwd: Path, env: dict[str, str], timeout: float = 180) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def host_database():
    """A database of its own for the host project, beside the test database."""
    db = connection.settings_dict
    name = f"{db['NAME']}_hostsite"
    admin = psycopg.connect(
        dbname="postgres",
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db["USER"],
        password=db.get("PASSWORD") or None,
        autocommit=True,
    )
    with admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield {
            "PGDATABASE": name,
            "PGHOST": db.get("HOST") or "127.0.0.1",
            "PGPORT": str(db.get("PORT") or 5432),
            "PGUSER": db["USER"],
            "PGPASSWORD": db.get("PASSWORD") or "",
        }
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_wheel_installs_into_a_fresh_project_and_runs_a_job(tmp_path, host_database):
    # 1. Build the wheel from a copy of the sources (the build leaves nothing in the repository).
    source = tmp_path / "source"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(PROJECT_ROOT / "queue_app", source / "queue_app", ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, source / name)
    base_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", str(tmp_path / "dist"), str(source), cwd=tmp_path, env=base_env,
    )  # fmt: skip

    # 2. A throwaway virtualenv; dependencies come from this interpreter's site-packages.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=tmp_path, env=base_env)
    python = venv / "bin" / "python"
    site = Path(run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=tmp_path, env=base_env).strip())  # fmt: skip
    (site / "shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
        "--find-links", str(tmp_path / "dist"), "jobsite-queue", cwd=tmp_path, env=base_env,
    )  # fmt: skip

    # 3. A fresh project, configured by the tutorial.
    # python -m django is django-admin (Django came through the .pth, without its script).
    run(str(python), "-m", "django", "startproject", "hostsite", str(tmp_path / "project"),
        cwd=tmp_path, env=base_env)  # fmt: skip
    project = tmp_path / "project"
    with open(project / "hostsite" / "settings.py", "a") as file:
        file.write("\n" + tutorial_block("# settings.py"))
    with open(project / "hostsite" / "urls.py", "a") as file:
        file.write("\n" + tutorial_block("# urls.py"))
    env = {**base_env, **host_database, "REDIS_URL": settings.REDIS_URL}

    def manage(*args: str, timeout: float = 180) -> str:
        return run(str(python), "manage.py", *args, cwd=project, env=env, timeout=timeout)

    def shell(code: str) -> str:
        """The last line ``code`` prints (the shell may print a banner before it)."""
        return manage("shell", "-c", code).strip().splitlines()[-1]

    where = shell("import queue_app; print(queue_app.__file__)")
    assert where.startswith(str(site)), "queue_app must come from the installed wheel"
    manage("check")
    manage("migrate", "--no-input")
    origin = shell(
        "from django.template.loader import get_template; "
        "print(get_template('admin/queue_app/dashboard.html').origin.name)"
    )
    assert origin.startswith(str(site))
    assert manage("findstatic", "queue_app/admin.css").strip()

    # 4. One job end to end: enqueue, relay to Redis, a worker runs it.
    enqueue = "from queue_app.services import enqueue_job; print(enqueue_job('demo.echo', {'hi': 1}).id)"
    job_id = shell(enqueue)
    manage("runrelay", "--once")
    manage("runworker", "--burst", "--concurrency", "1")
    outcome = shell(
        "import json; from queue_app.models import Job; "
        f"job = Job.objects.get(id='{job_id}'); print(json.dumps([job.status, job.result]))"
    )
    assert json.loads(outcome) == ["completed", {"hi": 1}]
