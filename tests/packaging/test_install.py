"""The app installs into a fresh Django project from a wheel and runs a job end to end.

Follows README.md's "Add it to your project" literally: its settings.py and urls.py blocks are
appended to a new ``django-admin startproject``. The throwaway virtualenv reads the
dependencies from this interpreter's site-packages (a .pth file), so nothing is downloaded.
"""

from __future__ import annotations

import json
import re

import pytest
from django.conf import settings

from tests.helpers import PROJECT_ROOT
from tests.packaging.host import HostProject, base_environment, build_wheel, install

pytestmark = [pytest.mark.processes, pytest.mark.redis]

SECTION = "## Add it to your project"


def readme_block(first_line: str) -> str:
    """The fenced python block of the README section that starts with ``first_line``."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"README section {SECTION!r} has no python block starting {first_line!r}")


def test_wheel_installs_into_a_fresh_project_and_runs_a_job(tmp_path, host_database):
    venv = install(build_wheel(tmp_path), tmp_path / "venv")
    env = {**base_environment(tmp_path), **host_database, "REDIS_URL": settings.REDIS_URL}
    project = HostProject.start(venv, tmp_path / "project", "hostsite", env)
    project.append("hostsite/settings.py", readme_block("# settings.py"))
    project.append("hostsite/urls.py", readme_block("# urls.py"))

    where = project.shell("import queue_app; print(queue_app.__file__)")
    assert where.startswith(str(venv.site_packages)), "queue_app must come from the installed wheel"
    project.manage("check")
    project.manage("migrate", "--no-input")
    origin = project.shell(
        "from django.template.loader import get_template; "
        "print(get_template('admin/queue_app/dashboard.html').origin.name)"
    )
    assert origin.startswith(str(venv.site_packages))
    assert project.manage("findstatic", "queue_app/admin.css").stdout.strip()

    # One job end to end: enqueue, relay to Redis, a worker runs it.
    enqueue = "from queue_app.services import enqueue_job; print(enqueue_job('demo.echo', {'hi': 1}).id)"
    job_id = project.shell(enqueue)
    project.manage("runrelay", "--once")
    project.manage("runworker", "--burst", "--concurrency", "1")
    outcome = project.shell(
        "import json; from queue_app.models import Job; "
        f"job = Job.objects.get(id='{job_id}'); print(json.dumps([job.status, job.result]))"
    )
    assert json.loads(outcome) == ["completed", {"hi": 1}]
