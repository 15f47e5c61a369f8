"""The console in a real browser: Debian's headless Chromium driven by Playwright, and a
person logging in through the form."""

from __future__ import annotations

from playwright.sync_api import Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def log_in_page(page: Page, base_url: str, admin_key: str) -> None:
    """Type the admin key into the login form; the tenants page opens."""
    page.goto(f"{base_url}/console")
    assert page.url.endswith("/console/login")
    page.fill("input[name=admin_key]", admin_key)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/console")
