"""Helpers of the browser tests: where chromium is, how it is started, screenshots, signing in."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

browser_test = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="browser tests need Debian's chromium at /usr/bin/chromium (`.ci/run` installs it)",
)


def screenshot(page, name: str) -> Path:
    """Save what the page shows under artifacts/screenshots/<name>.png, for people to look at."""
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page, base_url: str, *, username: str, password: str) -> None:
    page.goto(f"{base_url}/console/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/console/")


def nav(page, name: str) -> None:
    """Follow a link of the console's main navigation."""
    page.get_by_role("navigation", name="Console").get_by_role("link", name=name, exact=True).click()
