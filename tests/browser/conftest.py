"""Headless Chromium (Debian's, at /usr/bin/chromium) driven by Playwright against the live server.

Playwright's own browser download is never used: ./dev test installs the
distribution's Chromium. Every test saves a screenshot under
artifacts/screenshots/ (git-ignored), which CI keeps as an artifact.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
PASSWORD = "browser-test-password"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: ./dev test installs it (apt-get install chromium)")
    # Playwright's sync API keeps an event loop on this thread; the ORM calls the
    # tests make between browser steps are still plain synchronous code. Module
    # scope: the setting ends with these tests and never reaches later ones.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Browser, live_server) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def admin_page(page: Page, transactional_db) -> Page:
    """A page logged in to the admin through its login form, as a superuser."""
    get_user_model().objects.create_superuser("browser-admin", "admin@example.com", PASSWORD)
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", "browser-admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    return page


@pytest.fixture
def screenshot(page: Page, request):
    """``screenshot()`` saves the page as artifacts/screenshots/<test name>.png and returns the path."""

    def save() -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{request.node.name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0
        return path

    return save
