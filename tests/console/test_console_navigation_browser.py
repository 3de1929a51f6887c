"""The console's navigation and first load in a real browser: both playgrounds are in the menu at a
laptop's and a phone's width, and a first visit logs no error in the browser's console (the favicon
is served). Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.console.browser import browser_test, nav, screenshot, sign_in

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [390, 1280])
def test_both_playgrounds_are_in_the_navigation(page, live_server, alice, width):
    page.set_viewport_size({"width": width, "height": 844 if width == 390 else 900})
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    menu = page.get_by_role("navigation", name="Console")

    nav(page, "Chat playground")

    expect(page).to_have_url(f"{live_server.url}/console/playground/chat/")
    expect(page.locator("h1")).to_have_text("Chat playground")
    expect(menu.get_by_role("link", name="Chat playground", exact=True)).to_have_attribute(
        "aria-current", "page"
    )
    expect(menu.locator("[aria-current=page]")).to_have_count(1)
    screenshot(page, f"nav-chat-playground-{width}")
    nav(page, "Image playground")
    expect(page).to_have_url(f"{live_server.url}/console/playground/")
    expect(page.locator("h1")).to_have_text("Image playground")  # named as in the menu
    expect(menu.get_by_role("link", name="Image playground", exact=True)).to_have_attribute(
        "aria-current", "page"
    )
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_a_first_visit_logs_no_error_and_the_favicon_is_served(page, live_server, alice):
    errors, failed = [], []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)

    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    icon_href = page.locator("link[rel=icon]").get_attribute("href")
    icon = page.request.get(f"{live_server.url}/favicon.ico")
    page.goto(f"{live_server.url}/console/usage/")

    assert icon_href == "/favicon.ico"
    assert icon.status == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.body()[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
    assert errors == [] and failed == []
