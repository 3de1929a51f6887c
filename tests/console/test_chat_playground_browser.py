"""The chat playground in a real browser (chromium, Playwright) at desktop and phone widths: the
answer streamed by the page's script, then its tokens and cost; without the script, a page of its own.
Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from billing.models import LedgerEntry, UsageRecord
from tests.console.browser import browser_test, nav, screenshot, sign_in
from tests.factories import text_model_make

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": 1280, "phone": 390}


@pytest.fixture
def demo_chat(alice, chat_group, demo_upstream):
    alice.allowed_groups.add(chat_group)
    return text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])


def _charges(account) -> int:
    return LedgerEntry.objects.filter(kind=LedgerEntry.Kind.CHARGE, wallet__account=account).count()


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_the_chat_answer_streams_then_shows_tokens_and_cost(page, live_server, alice, demo_chat, width):
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    page.goto(f"{live_server.url}/console/playground/")
    nav(page, "Chat playground")
    page.get_by_label("Prompt").fill("Hello there")
    page.get_by_role("button", name="Send").click()

    expect(page.locator("#chat-charge")).to_contain_text("tokens in", timeout=60_000)
    expect(page.locator("#chat-answer")).not_to_be_empty()
    expect(page).to_have_url(f"{live_server.url}/console/playground/chat/")  # streamed, not posted
    record = UsageRecord.objects.get(account=alice)
    expect(page.locator("#chat-charge")).to_contain_text(
        f"{record.input_tokens} tokens in · {record.output_tokens} out; charged ¥"
    )
    assert _charges(alice) == 1
    screenshot(page, f"chat-playground-{width}")


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_without_script_the_chat_answer_has_a_page_reloaded_free(
    live_server, alice, demo_chat, width, browser_contexts
):
    context = browser_contexts(viewport={"width": width, "height": 900}, java_script_enabled=False)
    page = context.new_page()
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    page.goto(f"{live_server.url}/console/playground/chat/")
    page.get_by_label("Prompt").fill("Hello there")
    page.get_by_role("button", name="Send").click()

    expect(page).to_have_url(re.compile(r"/console/playground/chat/result/[^/]+/$"))
    expect(page.locator("#chat-answer")).not_to_be_empty()
    expect(page.locator("#chat-charge")).to_contain_text("charged ¥")
    screenshot(page, f"chat-playground-nojs-{width}")
    page.reload()
    expect(page.locator("#chat-answer")).not_to_be_empty()
    assert _charges(alice) == 1
