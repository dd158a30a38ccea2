"""The job list fits: at 1400 px with the navigation sidebar open the last-error column is on screen,
and at phone width (390 px) nothing but the table scrolls sideways. Screenshots of both go to
artifacts/screenshots/."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.admin.conftest import make_job
from tests.browser.conftest import SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.redis]

LONG_ERROR = (
    "ValueError: the invoice for customer 12345 has no lines and cannot be sent to the payment provider"
)


def failed_jobs() -> None:
    for n in range(3):
        make_job("failed", type="demo.fail", queue="default", priority="high", error=f"{LONG_ERROR} ({n})")
    make_job("completed")


def open_list(page: Page, width: int, height: int, name: str) -> None:
    page.set_viewport_size({"width": width, "height": height})
    page.goto("/admin/queue_app/job/")
    expect(page.locator("#result_list")).to_be_visible()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"job-list-{name}.png"), full_page=True)


def test_last_error_column_is_on_screen_at_1400px_with_the_sidebar_open(admin_page: Page):
    failed_jobs()
    open_list(admin_page, 1400, 900, "1400px")
    expect(admin_page.locator("#nav-sidebar")).to_be_visible()
    # The table does not scroll inside its box, and the error column's right edge is in it.
    results = admin_page.locator("#changelist .results")
    widths = admin_page.evaluate(  # shown on failure: which column takes the room
        "[...document.querySelectorAll('#result_list thead th')].map(th => [th.className, th.offsetWidth])"
    )
    assert results.evaluate("box => box.scrollWidth <= box.clientWidth"), (
        str(widths),
        results.evaluate("box => [box.scrollWidth, box.clientWidth]"),
    )
    container, header = results.bounding_box(), admin_page.locator("th.column-error_excerpt").bounding_box()
    assert header["x"] + header["width"] <= container["x"] + container["width"] + 1, (header, container)
    error = admin_page.locator("td.field-error_excerpt", has_text="ValueError: the invoice").first
    expect(error).to_be_visible()
    assert error.bounding_box()["width"] >= 100  # room to read the exception type
    assert admin_page.evaluate("document.documentElement.scrollWidth") <= 1400


def test_phone_width_scrolls_only_the_table(admin_page: Page):
    failed_jobs()
    open_list(admin_page, 390, 844, "390px")
    assert admin_page.evaluate("document.documentElement.scrollWidth") <= 390


def test_index_names_the_app_once_links_a_real_site_and_has_a_favicon(admin_page: Page):
    admin_page.goto("/admin/")
    assert admin_page.locator("#content-main").inner_text().upper().count("JOB QUEUE") == 1
    view_site = admin_page.get_by_role("link", name="View site")
    if view_site.count():
        response = admin_page.request.get(view_site.get_attribute("href"))
        assert response.status == 200
    icon = admin_page.locator('link[rel="icon"]')
    expect(icon).to_have_count(1)
    assert admin_page.request.get(icon.get_attribute("href")).status == 200
