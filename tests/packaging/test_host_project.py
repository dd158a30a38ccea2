"""A new Django project set up exactly as docs/tutorials/add-to-your-project.md says runs the queue.

The app comes from its wheel, in a virtualenv of its own, into a ``django-admin
startproject mysite``; nothing of this repository's settings is on the path. The test
walks the page's marked blocks in order (tests/packaging/tutorial.py): it writes the
settings, URLs, handler and task the page shows, runs the commands it shows (``check``,
``migrate``, ``runsystem``, the second terminal's enqueues), and then uses what the page
promises: the REST API with a token (create, read, cancel), the schema, Swagger UI in a
browser that may reach no other host, the admin's job list, detail and dashboard, a
``@task`` run by runsystem's ``runworker``, and ``check --deploy``. The page and this test
cannot drift apart.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from playwright.sync_api import Route, expect, sync_playwright

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.helpers import PROJECT_ROOT, kill_group, wait_until
from tests.packaging.host import HostProject, base_environment, build_wheel, install
from tests.packaging.tutorial import steps
from tests.reconciler.proxy import free_port

pytestmark = [pytest.mark.processes, pytest.mark.redis, pytest.mark.browser]

PAGE = PROJECT_ROOT / "docs" / "tutorials" / "add-to-your-project.md"
DOCUMENTED_ADDRESS = "127.0.0.1:8000"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PASSWORD = "host-project-admin-password"

# One shell start instead of four: where the app and its templates come from, an admin, a token.
SET_UP = f"""
import json, queue_app
from django.contrib.auth import get_user_model
from django.template.loader import get_template
from rest_framework.authtoken.models import Token
admin = get_user_model().objects.create_superuser("admin", "admin@example.com", "{PASSWORD}")
print(json.dumps({{
    "app": queue_app.__file__,
    "dashboard": get_template("admin/queue_app/dashboard.html").origin.name,
    "base_site": get_template("admin/base_site.html").origin.name,
    "token": Token.objects.create(user=admin).key,
}}))
"""


class Output:
    """A started process's output lines, read as they come (its children share the pipes)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        for stream, lines in ((process.stdout, self.stdout), (process.stderr, self.stderr)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def call(self, method: str, path: str, body: dict | None = None, token: str | None = None):
        """(status, JSON body) of one request."""
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Token {token or self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def finished(self, job_id: str) -> dict | None:
        status, job = self.call("GET", f"/api/jobs/{job_id}/")
        assert status == 200, job
        return job if job["status"] in ("completed", "failed", "cancelled") else None


def test_a_new_project_set_up_as_the_tutorial_says_runs_the_queue(tmp_path, host_database):
    venv = install(build_wheel(tmp_path), tmp_path / "venv")
    stores = {**host_database, "REDIS_URL": settings.REDIS_URL, "CACHE_URL": settings.CACHE_URL}
    env = {**base_environment(tmp_path), **stores, "PYTHONUNBUFFERED": "1"}
    project = HostProject.start(venv, tmp_path / "project", "mysite", env)
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    # 1. The page, block by block.
    ran: dict[str, subprocess.CompletedProcess] = {}
    system = None
    try:
        for step in steps(PAGE):
            if step.kind == "append":
                project.append(step.path, step.text)
            elif step.kind == "create":
                project.create(step.path, step.text)
            elif step.kind == "run":
                ran.update((line, project.run(line)) for line in step.commands())
            else:
                (line,) = step.commands()
                assert DOCUMENTED_ADDRESS in line
                started = project.spawn(
                    line.replace(DOCUMENTED_ADDRESS, f"127.0.0.1:{port}"),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                system = Output(started)
        assert system is not None, "the page starts no process"
        _follow_the_page(project, venv, ran, system, base)
    finally:
        if system is not None:
            kill_group(system.process)  # runsystem's children too, should the test fail midway


def _follow_the_page(project, venv, ran, system, base):
    check = next(done for line, done in ran.items() if line == "python manage.py check")
    assert "System check identified no issues" in check.stdout, check.stdout + check.stderr

    # The second terminal's enqueues print a job id each, and nothing of the queue's debug log.
    receipt_line, task_line = [line for line in ran if "shell -c" in line]
    receipt_id, task_id = (ran[line].stdout.strip().splitlines()[-1] for line in (receipt_line, task_line))
    assert UUID.fullmatch(receipt_id) and UUID.fullmatch(task_id), (receipt_id, task_id)
    for line in (receipt_line, task_line):
        assert "job_enqueued" not in ran[line].stdout + ran[line].stderr

    facts = json.loads(project.shell(SET_UP))
    site = str(venv.site_packages)
    assert facts["app"].startswith(site) and facts["dashboard"].startswith(site), facts
    # The site's own admin branding stays in the repository's templates/, not in the wheel.
    assert "django/contrib/admin" in facts["base_site"], facts
    api = Api(base, facts["token"])

    # 2. runsystem serves the API; its relay and worker run the jobs of the second terminal.
    wait_until(lambda: _status(base + "/api/health/") == 200, timeout=90, message="runsystem's web server")
    receipt = wait_until(lambda: api.finished(receipt_id), timeout=60, message="the shell's job")
    assert (receipt["status"], receipt["queue"], receipt["result"]) == (
        "completed",
        "emails",
        {"sent_to": "ann@example.com"},
    )
    assert wait_until(lambda: api.finished(task_id), timeout=60)["status"] == "completed"
    # Run by runworker: runsystem's worker child, which it names "runsystem".
    result = project.shell(
        f"from shop.tasks import send_newsletter; r = send_newsletter.get_result('{task_id}'); "
        "print(r.status, '|', r.return_value, '|', r.task.queue_name, '|', r.worker_ids)"
    )
    assert re.fullmatch(r"SUCCESSFUL \| newsletter 7 sent \| emails \| \['runsystem[^']*'\]", result), result

    # 3. The REST API with a token: create, read, cancel; a wrong token is a 401, not a 500.
    status, created = api.call(
        "POST",
        "/api/jobs/",
        {"type": "shop.send_receipt", "payload": {"order": 43, "email": "bo@example.com"}, "queue": "emails"},
    )
    assert status == 201, created
    assert api.call("GET", f"/api/jobs/{created['id']}/")[0] == 200
    done = wait_until(lambda: api.finished(created["id"]), timeout=60, message="the API's job")
    assert (done["status"], done["result"]) == ("completed", {"sent_to": "bo@example.com"})
    status, later = api.call(
        "POST", "/api/jobs/", {"type": "shop.send_receipt", "payload": {"order": 44}, "delay_seconds": 3600}
    )
    assert (status, later["status"]) == (201, "queued"), later
    status, cancelled = api.call("POST", f"/api/jobs/{later['id']}/cancel/")
    assert (status, cancelled["status"]) == (200, "cancelled"), cancelled
    assert api.call("POST", f"/api/jobs/{later['id']}/cancel/")[0] == 409
    status, refused = api.call("GET", "/api/jobs/", token="0" * 40)
    assert (status, refused["code"]) == (401, "authentication_failed")

    # 4. The schema, with no REST_FRAMEWORK or SPECTACULAR_SETTINGS in the project.
    with urllib.request.urlopen(base + "/api/schema/?format=json", timeout=30) as response:
        schema = json.loads(response.read())
    assert schema["info"]["title"] == "Job queue API"
    assert {"/api/jobs/", "/api/jobs/{id}/", "/api/jobs/{id}/cancel/"} <= set(schema["paths"])
    assert schema["components"]["schemas"]["QueueEnum"]["enum"] == ["default", "emails"]
    assert "shop.send_receipt" in schema["components"]["schemas"]["TypeEnum"]["enum"]

    # 5. Swagger UI and the admin in a browser that may reach this server only.
    _browse(base, receipt_id)

    # 6. Stopping runsystem stops everything; the queue's INFO lines went out through LOGGING.
    system.process.send_signal(signal.SIGTERM)
    assert system.process.wait(timeout=90) == 0, "\n".join(system.stderr[-40:])
    assert "All processes stopped." in system.stdout
    logged = "\n".join(system.stderr)
    assert re.search(r" INFO queue_app\.runtime\.relay relay_started batch_size=500", logged), logged[-3000:]
    assert re.search(r" INFO queue_app\.runtime\.supervisor worker_process_started ", logged), logged[-3000:]
    assert "job_enqueued" not in logged and "jobs_claimed" not in logged  # debug lines stay out

    # 7. check --deploy: Django's own messages about the new project's settings (DEBUG, the
    # console mailer), none from the queue, nor from drf-spectacular's check of its schema.
    deploy = subprocess.run(
        project.command("python manage.py check --deploy"),
        cwd=project.root, env=project.env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    ids = set(re.findall(r"\(([\w.]+)\) ", deploy.stdout + deploy.stderr))
    assert "security.W018" in ids, deploy.stderr  # DEBUG on, as startproject leaves it
    assert {message.split(".")[0] for message in ids} <= {"security", "mail"}, deploy.stderr


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def _browse(base: str, job_id: str) -> None:
    elsewhere: list[str] = []
    here = urlsplit(base).netloc

    def only_here(route: Route) -> None:
        if urlsplit(route.request.url).netloc == here:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(base_url=base)
            context.set_default_timeout(30_000)
            context.route("**/*", only_here)
            page = context.new_page()

            page.goto("/api/docs/")
            expect(page.locator(".swagger-ui .info .title")).to_contain_text("Job queue API")
            expect(page.locator(".opblock-summary-path", has_text="/api/jobs/{id}/cancel/")).to_have_count(1)

            page.goto("/admin/login/?next=/admin/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/")
            # queue_app's admin/index.html (the app is first in INSTALLED_APPS): the dashboard link.
            page.click("#queue-dashboard-module a")
            page.wait_for_url("**/admin/queue_app/job/dashboard/")
            expect(page.locator("#content")).to_contain_text("emails")

            page.goto("/admin/queue_app/job/")
            expect(page.locator("#result_list")).to_contain_text("shop.send_receipt")
            page.goto(f"/admin/queue_app/job/{job_id}/change/")
            expect(page.locator("#content")).to_contain_text(job_id)
            expect(page.locator("#content")).to_contain_text("completed")
        finally:
            browser.close()
    assert elsewhere == [], f"requests to other hosts: {elsewhere}"
