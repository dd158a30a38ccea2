"""End to end in headless Chromium: log in, filter, search, read a trail, retry, watch the dashboard."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from queue_app import services
from queue_app.admin import jobs as job_admin
from queue_app.models import Job, OutboxMessage
from tests.admin.conftest import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.redis]

ROWS = "#result_list tbody tr"


def open_job_list(page: Page) -> None:
    page.goto("/admin/")
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.locator("#result_list")).to_be_visible()


def test_login_and_filter_by_status(admin_page: Page, screenshot):
    failed = [make_job("failed", error=f"RuntimeError: failure {i}") for i in range(2)]
    make_job("completed")
    make_job("queued")
    expect(admin_page.locator("#user-tools")).to_contain_text("browser-admin")
    open_job_list(admin_page)
    expect(admin_page.locator(ROWS)).to_have_count(4)

    status_filter = admin_page.locator('#changelist-filter details[data-filter-title="status"]')
    status_filter.get_by_role("link", name="Failed").click()
    expect(admin_page).to_have_url(re.compile(r"status__exact=failed"))
    expect(admin_page.locator(ROWS)).to_have_count(2)
    expect(admin_page.locator(f"{ROWS} .job-status-failed")).to_have_count(2)
    for job in failed:
        expect(admin_page.locator(f'{ROWS} code[title="{job.id}"]')).to_be_visible()
    screenshot()


def test_search_by_id(admin_page: Page, screenshot):
    wanted = make_job("failed")
    others = [make_job("queued") for _ in range(3)]
    open_job_list(admin_page)
    expect(admin_page.locator(ROWS)).to_have_count(4)
    admin_page.fill("#searchbar", str(wanted.id))
    admin_page.press("#searchbar", "Enter")
    expect(admin_page.locator(ROWS)).to_have_count(1)
    expect(admin_page.locator(ROWS)).to_contain_text(str(wanted.id)[-8:])
    for job in others:
        expect(admin_page.locator(f'code[title="{job.id}"]')).to_have_count(0)
    screenshot()


def test_open_a_job_and_read_its_log_trail(admin_page: Page, screenshot):
    job = make_job("failed", type="demo.fail", error="RuntimeError: the upstream said no")
    open_job_list(admin_page)
    admin_page.locator(f'{ROWS} a:has(code[title="{job.id}"])').click()
    expect(admin_page).to_have_url(re.compile(rf"/admin/queue_app/job/{job.id}/change/"))
    trail = admin_page.locator(".inline-group")
    expect(trail).to_contain_text("Log trail")
    events = trail.locator("td.field-event")
    expect(events).to_have_text(["enqueued", "claimed", "failed"])
    expect(trail).to_contain_text("RuntimeError: the upstream said no")
    expect(admin_page.locator('input[name="_save"]')).to_have_count(0)
    screenshot()


def test_retry_action_on_a_failed_job(admin_page: Page, screenshot):
    job = make_job("failed")
    make_job("completed")
    open_job_list(admin_page)
    admin_page.locator(f'input.action-select[value="{job.id}"]').check()
    admin_page.select_option('select[name="action"]', "retry_selected")
    admin_page.locator('.actions button[name="index"]').click()
    expect(admin_page.locator(".messagelist .success")).to_have_text("Retried 1 job.")
    row = admin_page.locator(f'{ROWS}:has(code[title="{job.id}"])')
    expect(row.locator(".job-status")).to_have_text("queued")
    assert Job.objects.get(id=job.id).status == "queued"
    assert OutboxMessage.objects.filter(job_id=job.id, action="enqueue").count() == 2
    screenshot()


def test_dashboard_shows_the_queue_and_refreshes_itself(admin_page: Page, screenshot, monkeypatch):
    monkeypatch.setattr(job_admin, "DASHBOARD_REFRESH_SECONDS", 1)
    make_job("queued")
    make_job("completed")
    make_job("failed", error="RuntimeError: shown on the dashboard")
    admin_page.goto("/admin/")
    admin_page.get_by_role("link", name="Queue dashboard").click()
    expect(admin_page.locator("h1")).to_have_text("Queue dashboard")
    expect(admin_page.locator("svg.queue-chart")).to_have_count(3)
    expect(admin_page.locator("#card-queued")).to_have_text("1")
    expect(admin_page.locator("#recent-failures")).to_contain_text("RuntimeError: shown on the dashboard")
    expect(admin_page.locator('tr.queue-depth[data-queue="default"] .pg-queued')).to_have_text("1")

    # A job enqueued now shows up without a reload: the page fetches its figures again.
    services.enqueue_job("demo.echo", {"n": 2})
    expect(admin_page.locator("#card-queued")).to_have_text("2", timeout=15_000)
    expect(admin_page.locator("#card-outbox")).to_have_text("4")
    screenshot()
