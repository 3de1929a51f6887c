"""The console's Content-Security-Policy in a real browser (chromium, Playwright): every page's own
script and styles pass it (no violation reported while the pages are used, the script's features
shown), and what the policy is for is refused (an inline script does not run)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.console.browser import browser_test, nav, sign_in
from tests.factories import text_model_make

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]

# Report every violation on the page into a list the test reads back.
VIOLATIONS_WATCH = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


def _violations(page) -> list[str]:
    return page.evaluate("window.__cspViolations")


def test_the_console_pages_pass_their_content_security_policy(
    page, live_server, alice, alpha_model, chat_group, demo_upstream
):
    alice.allowed_groups.add(chat_group)
    text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])
    page.add_init_script(VIOLATIONS_WATCH)
    messages: list[str] = []
    page.on("console", lambda message: messages.append(message.text))
    base = live_server.url

    login = page.goto(f"{base}/accounts/login/")
    assert "script-src 'self'" in login.headers["content-security-policy"]
    sign_in(page, base, username="alice", password="alice-password-1")
    seen = {"sign-in": _violations(page)}

    for name in ("Overview", "Usage", "API keys", "Image playground", "Chat playground"):
        nav(page, name)
        seen[name] = _violations(page)
    nav(page, "API keys")
    page.get_by_label("Label").fill("csp test")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("button", name="Copy")).to_be_visible()  # added by the page's script
    seen["key created"] = _violations(page)

    page.goto(f"{base}/console/playground/chat/")
    page.get_by_label("Prompt").fill("Hello there")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#chat-charge")).to_contain_text("tokens in", timeout=60_000)  # fetched by script
    seen["chat"] = _violations(page)

    assert all(found == [] for found in seen.values()), seen
    assert not [text for text in messages if "Content Security Policy" in text], messages

    page.evaluate(
        """() => {
          window.__inlineRan = false;
          const script = document.createElement("script");
          script.textContent = "window.__inlineRan = true";
          document.body.append(script);
        }"""
    )
    assert page.evaluate("window.__inlineRan") is False
    assert any(found.startswith("script-src") for found in _violations(page))
