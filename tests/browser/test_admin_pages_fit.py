"""The dashboard, a job's page and a workflow's page at a desktop (1400 x 900) and a phone
(390 x 844): no page scrolls sideways on the phone, and a job's page puts what an operator comes for (status,
attempts, times, error, the log trail, Cancel / Retry) on the first screen of the desktop.
Screenshots of each go to artifacts/screenshots/."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

import tests.probe.jobs  # noqa: F401 - registers the wf.* handlers
from queue_app.services import JobRequest, chord, enqueue_workflow
from queue_app.testing import run_jobs
from tests.admin.conftest import make_job
from tests.browser.conftest import SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.redis]

SIZES = {"desktop": (1400, 900), "phone": (390, 844)}
ERROR = "ValueError: the invoice for customer 12345 has no lines and cannot be sent to the payment provider"


def show(page: Page, url: str, size: str, name: str) -> None:
    width, height = SIZES[size]
    page.set_viewport_size({"width": width, "height": height})
    page.goto(url)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}px.png"), full_page=True)


def page_width(page: Page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


@pytest.mark.parametrize("size", SIZES)
def test_the_dashboard_does_not_scroll_sideways(admin_page: Page, size):
    for status in ("failed", "completed", "queued"):
        make_job(status, type="demo.fail", error=ERROR)
    show(admin_page, "/admin/queue_app/job/dashboard/", size, "dashboard")
    assert page_width(admin_page) <= SIZES[size][0]


@pytest.mark.parametrize("size", SIZES)
def test_a_jobs_page_fits_and_shows_its_summary_and_trail_first(admin_page: Page, size):
    job = make_job("failed", type="demo.fail", error=ERROR)
    show(admin_page, f"/admin/queue_app/job/{job.id}/change/", size, "job-page")
    width, height = SIZES[size]
    assert page_width(admin_page) <= width
    summary = admin_page.locator(".job-summary")
    expect(summary).to_contain_text("failed")
    expect(summary).to_contain_text("ValueError: the invoice")
    expect(admin_page.get_by_role("button", name="Retry")).to_be_visible()
    if size == "desktop":
        trail = admin_page.locator(".job-trail")
        expect(trail).to_contain_text("failed")
        assert trail.bounding_box()["y"] < height, "the log trail starts below the first screen"


@pytest.mark.parametrize("size", SIZES)
def test_a_workflows_page_fits_and_draws_its_graph(admin_page: Page, size):
    fan_out = [JobRequest("wf.add", {"value": n}) for n in range(6)]
    callback = JobRequest("wf.collect")
    workflow = enqueue_workflow(chord([*fan_out, JobRequest("wf.fail")], callback), name="fan-in")
    run_jobs()
    show(admin_page, f"/admin/queue_app/workflow/{workflow.id}/change/", size, "workflow-page")
    expect(admin_page.locator("svg.workflow-graph")).to_be_visible()
    assert page_width(admin_page) <= SIZES[size][0]
