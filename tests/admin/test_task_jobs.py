"""django.tasks jobs in the admin: the task's import path is their type, and a filter."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.admin.conftest import changelist, listed_ids, make_job
from tests.probe.jobs import add, whoami

pytestmark = pytest.mark.django_db


def type_cells(html: str) -> list[str]:
    return re.findall(r'<(?:td|th) class="field-job_type"[^>]*>(.*?)</(?:td|th)>', html, re.S)


def task_choices(response) -> set[str]:
    return {
        choice["display"]
        for spec in response.context["cl"].filter_specs
        if spec.title == "task"
        for choice in spec.choices(response.context["cl"])
    }


def test_task_jobs_show_their_import_path_as_type(admin_client):
    add.enqueue(1, 2)
    make_job(type="demo.echo")
    html = admin_client.get(changelist()).content.decode()
    assert sorted(type_cells(html)) == ["demo.echo", "tests.probe.jobs.add"]


def test_filter_by_task_import_path_without_reading_the_table_for_choices(admin_client):
    added, who = add.enqueue(1, 2), whoami.enqueue()
    other = make_job(type="demo.echo")
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(changelist())
    assert {"tests.probe.jobs.add", "tests.probe.jobs.whoami"} <= task_choices(response)
    assert not [q["sql"] for q in captured.captured_queries if "DISTINCT" in q["sql"].upper()]

    assert listed_ids(admin_client.get(changelist("task=tests.probe.jobs.add"))) == {added.id}
    assert listed_ids(admin_client.get(changelist("task=tests.probe.jobs.whoami"))) == {who.id}
    assert str(other.id) not in listed_ids(admin_client.get(changelist("task=tests.probe.jobs.add")))
