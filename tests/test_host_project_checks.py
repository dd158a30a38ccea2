"""``manage.py check`` names what a project that adds queue_app must still add.

Checked as Django's own check-framework tests do (tests/check_framework in Django:
``run_checks()`` under changed settings), and once in a fresh process configured as a bare
project that only lists queue_app, where a missing piece must be a message, not a crash.
"""

import json
import subprocess
import sys

import pytest
from django.core import checks
from django.tasks import default_task_backend
from django.test import override_settings

from tests.helpers import PROJECT_ROOT, child_env

BACKEND = "queue_app.tasks_backend.JobQueueBackend"
REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"

BARE_PROJECT = """
import json
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                    "django.contrib.sessions", "django.contrib.messages", "queue_app"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
)
django.setup()
from django.core import checks
print(json.dumps([[m.id, m.msg] for m in checks.run_checks() if m.id.startswith("queue_app.")]))
"""


def queue_messages() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for message in checks.run_checks():
        if message.id.startswith("queue_app."):
            found.setdefault(message.id, []).append(message.msg)
    return found


def test_a_bare_project_is_told_each_missing_piece():
    done = subprocess.run(
        [sys.executable, "-c", BARE_PROJECT],
        cwd=PROJECT_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, list[str]] = {}
    for message_id, text in json.loads(done.stdout.strip().splitlines()[-1]):
        found.setdefault(message_id, []).append(text)

    assert set(found) == {f"queue_app.{code}" for code in ("E010", "E011", "W012", "W013", "W106")}
    assert "'django.db.backends.sqlite3'" in found["queue_app.E010"][0]
    missing = ["rest_framework", "rest_framework.authtoken", "django_filters", "drf_spectacular"]
    assert found["queue_app.E011"] == [
        f"queue_app needs {app!r} in INSTALLED_APPS." for app in [*missing, "drf_spectacular_sidecar"]
    ]
    assert "LocMemCache" in found["queue_app.W013"][0]
    assert "ImmediateBackend" in found["queue_app.W106"][0]


def test_this_project_needs_nothing_more():
    assert queue_messages() == {}


@pytest.mark.parametrize(
    ("backend", "rate", "warned"),
    [
        ("django.core.cache.backends.locmem.LocMemCache", "20/hour", True),
        ("django.core.cache.backends.dummy.DummyCache", "20/hour", True),
        ("django.core.cache.backends.locmem.LocMemCache", "", False),  # no limit to count
        (REDIS_CACHE, "20/hour", False),
    ],
)
def test_a_cache_kept_per_process_is_a_warning_under_the_failure_limit(settings, backend, rate, warned):
    settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": settings.CACHE_URL}}
    settings.AUTH_FAILURE_RATE = rate
    assert ("queue_app.W013" in queue_messages()) is warned


@pytest.mark.parametrize("rate", ["twenty", "20", "0/hour", "20/fortnight", "-1/s", "２/s"])
def test_a_malformed_failure_rate_is_error_e004(settings, rate):
    settings.AUTH_FAILURE_RATE = rate
    assert queue_messages()["queue_app.E004"] == [
        f"AUTH_FAILURE_RATE must look like 20/hour (count/second|minute|hour|day), not {rate!r}"
    ]


def test_the_app_after_the_admin_is_warning_w012(settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "queue_app"] + ["queue_app"]
    assert "queue_app.W012" in queue_messages()


def test_tasks_without_the_backend_is_warning_w106():
    with override_settings(TASKS={"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}):
        (message,) = queue_messages()["queue_app.W106"]
    assert "django.tasks.backends.dummy.DummyBackend" in message


def test_a_queue_no_tasks_alias_lists_is_warning_w105(queue_config):
    queue_config(QUEUES="default,emails")
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}):
        messages = queue_messages()
    assert messages == {
        "queue_app.W105": [
            "JOBQUEUE queue 'emails' is in no TASKS alias's QUEUES: @task(queue_name='emails') is refused."
        ]
    }


def test_an_alias_without_queues_serves_every_jobqueue_queue(queue_config):
    """Django's default for a backend without QUEUES is "default" alone; this backend takes every
    queue the job queue serves, read when used, so a queue added to JOBQUEUE needs no TASKS edit."""
    with override_settings(TASKS={"default": {"BACKEND": BACKEND}}):
        queue_config(QUEUES="default,emails")
        assert default_task_backend.queues == {"default", "emails"}
        queue_config(QUEUES="default,emails,reports")
        assert default_task_backend.queues == {"default", "emails", "reports"}
        assert queue_messages() == {}
