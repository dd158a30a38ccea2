"""In Chromium, the policy blocks nothing the pages need: the dashboard refreshes, the API docs render."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from queue_app import services
from queue_app.admin import jobs as job_admin

pytestmark = [pytest.mark.redis]


def csp_violations(page: Page) -> list[str]:
    messages: list[str] = []
    page.on("console", lambda message: messages.append(message.text))
    return messages


def test_api_docs_render_under_the_policy(page: Page, transactional_db, screenshot):
    messages = csp_violations(page)
    page.goto("/api/docs/")
    page.wait_for_selector("#swagger-ui .info .title")
    assert "Job queue API" in page.inner_text("#swagger-ui .info .title")
    screenshot()
    assert not [text for text in messages if "Content Security Policy" in text], messages


def test_dashboard_script_runs_under_the_policy(admin_page: Page, screenshot, monkeypatch):
    monkeypatch.setattr(job_admin, "DASHBOARD_REFRESH_SECONDS", 1)
    messages = csp_violations(admin_page)
    admin_page.goto("/admin/queue_app/job/dashboard/")
    expect(admin_page.locator("#card-queued")).to_have_text("0")
    # Only the script (allowed by its nonce) brings the new figure in without a reload.
    services.enqueue_job("demo.echo", {"n": 1})
    expect(admin_page.locator("#card-queued")).to_have_text("1", timeout=15_000)
    screenshot()
    assert not [text for text in messages if "Content Security Policy" in text], messages
