"""The admin's workflow page (its graph drawn as SVG on the server, each node coloured by its
step's status and linked to its job), the batch page's counts, the job list's filters by
workflow and batch, and a job page naming its parents and dependents."""

import re

import pytest
from django.urls import reverse

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.admin.workflows import STATUS_COLOURS
from queue_app.services import JobRequest, chord, enqueue_batch, enqueue_job, enqueue_workflow
from queue_app.states import Status
from queue_app.testing import run_jobs
from tests.admin.conftest import changelist, listed_ids

pytestmark = pytest.mark.django_db


def test_the_workflow_page_draws_each_step_linked_to_its_job_and_coloured_by_status(user_client):
    workflow = enqueue_workflow(
        chord([JobRequest("wf.add", {"value": 1}), JobRequest("wf.fail")], JobRequest("wf.collect")),
        name="fan-in",
    )
    run_jobs()
    page = user_client("view_job").get(reverse("admin:queue_app_workflow_change", args=[workflow.id]))
    assert page.status_code == 200
    html = page.content.decode()
    svg = re.search(r"<svg class=\"workflow-graph\".*?</svg>", html, flags=re.S).group(0)
    for job in workflow.jobs.values():
        assert reverse("admin:queue_app_job_change", args=[job.id]) in svg
    assert svg.count("<rect") == 3 and svg.count("<line") == 2
    assert STATUS_COLOURS[Status.COMPLETED] in svg
    assert STATUS_COLOURS[Status.FAILED] in svg
    assert STATUS_COLOURS[Status.CANCELLED] in svg  # the callback, cancelled by the failure
    assert f"?workflow={workflow.id}" in html


def test_the_job_list_filters_by_workflow_and_by_batch(user_client):
    workflow = enqueue_workflow({"a": JobRequest("wf.add"), "b": JobRequest("wf.add", depends_on=["a"])})
    batch = enqueue_batch([JobRequest("wf.add"), JobRequest("wf.add")], on_complete=JobRequest("wf.collect"))
    other = enqueue_job("wf.add")
    client = user_client("view_job")
    in_workflow = listed_ids(client.get(changelist(f"workflow={workflow.id}")))
    assert in_workflow == {str(job.id) for job in workflow.jobs.values()}
    in_batch = listed_ids(client.get(changelist(f"batch={batch.id}")))
    assert in_batch == {str(job.id) for job in batch.jobs}
    assert str(other.id) not in in_workflow | in_batch
    assert listed_ids(client.get(changelist("workflow=not-an-id"))) == set()


def test_the_batch_page_shows_its_counts_and_callbacks(user_client):
    batch = enqueue_batch([JobRequest("wf.add"), JobRequest("wf.fail")], on_complete=JobRequest("wf.collect"))
    run_jobs()
    html = (
        user_client("view_job").get(reverse("admin:queue_app_batch_change", args=[batch.id])).content.decode()
    )
    assert "total: 2" in html and "completed: 1" in html and "failed: 1" in html and "pending: 0" in html
    assert reverse("admin:queue_app_job_change", args=[batch.on_complete_id]) in html


def test_a_job_page_names_its_workflow_parents_and_dependents(user_client):
    workflow = enqueue_workflow({"a": JobRequest("wf.add"), "b": JobRequest("wf.add", depends_on=["a"])})
    client = user_client("view_job")
    parent_page = client.get(
        reverse("admin:queue_app_job_change", args=[workflow.jobs["a"].id])
    ).content.decode()
    assert "waited for by" in parent_page
    assert reverse("admin:queue_app_job_change", args=[workflow.jobs["b"].id]) in parent_page
    child_page = client.get(
        reverse("admin:queue_app_job_change", args=[workflow.jobs["b"].id])
    ).content.decode()
    assert "waits for" in child_page and "step <b>b</b>" in child_page
