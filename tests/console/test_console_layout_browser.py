"""Every console page at a phone's width (390 px) and a laptop's (1280 px) in a real browser: no
page-level horizontal scroll, and the overview's latest calls one line each at 1280 px. Screenshots
go to artifacts/screenshots/layout-<page>-<width>.png."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing.models import UsageRecord
from keys.services import oauth_token_create
from tests.console.browser import browser_test, screenshot, sign_in
from tests.console.test_responses_page import keep

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]

PAGES = {
    "overview": "/console/",
    "keys": "/console/keys/",
    "key-revoke": "/console/keys/{key}/revoke/",
    "key-limits": "/console/keys/{key}/limits/",
    "usage": "/console/usage/",
    "alerts": "/console/alerts/",
    "playground": "/console/playground/",
    "chat-playground": "/console/playground/chat/",
    "applications": "/console/applications/",
    "operator-revoke": "/console/applications/operator/revoke/",
    "responses": "/console/responses/",
    "response-delete": "/console/responses/resp_0123456789abcdef0123456789abcdef/delete/",
}


@pytest.fixture
def busy_alice(alice, alice_key, alpha_model):
    """alice with a key, an operator-issued token and calls of every kind, with long request ids."""
    oauth_token_create(account=alice, scopes=["profile:read"])
    keep(alice, "resp_0123456789abcdef0123456789abcdef", items=2)
    api_key = alice_key[0]
    now = timezone.now()
    common = {"account": alice, "credential": f"api_key:{api_key.pk}", "latency_ms": 12, "billing": "balance"}
    UsageRecord.objects.create(
        request_id="req_9f1c2b7e4d5a46c0b1e2f3a4b5c6d7e8",
        model_id="alpha-image-2",
        endpoint="images.generations",
        status=200,
        amount=Decimal("0.15"),
        created_at=now - timedelta(minutes=3),
        **common,
    )
    UsageRecord.objects.create(
        request_id="req_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        model_id="a-rather-long-chat-model-name-2026-11",
        endpoint="chat.completions",
        status=200,
        amount=Decimal("0.00002400"),
        input_tokens=123456,
        cached_tokens=2048,
        cache_write_tokens=512,
        output_tokens=4321,
        created_at=now - timedelta(minutes=2),
        **common,
    )
    UsageRecord.objects.create(
        request_id="req_ffeeddccbbaa99887766554433221100",
        model_id="no-such-model",
        endpoint="messages.count_tokens",
        status=404,
        error_code="model_not_found",
        created_at=now - timedelta(minutes=1),
        **common,
    )
    return alice


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.parametrize("width", [390, 1280])
def test_every_console_page_fits_the_viewport(browser_context, live_server, busy_alice, alice_key, width):
    page = browser_context.new_page()
    page.set_viewport_size({"width": width, "height": 844 if width == 390 else 900})
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    for name, path in PAGES.items():
        page.goto(live_server.url + path.format(key=alice_key[0].pk))
        expect(page.locator("h1")).to_be_visible()
        screenshot(page, f"layout-{name}-{width}")
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert no_horizontal_scroll(page), f"{name} at {width} px scrolls sideways: {widths}"


@pytest.mark.parametrize("width", [390, 1280])
def test_the_sign_in_page_fits_the_viewport(browser_context, live_server, width):
    page = browser_context.new_page()
    page.set_viewport_size({"width": width, "height": 844 if width == 390 else 900})
    page.goto(live_server.url + "/console/")  # redirected to sign in
    expect(page.locator("input[type=password]")).to_be_visible()
    screenshot(page, f"layout-sign-in-{width}")
    assert no_horizontal_scroll(page), f"the sign-in page at {width} px scrolls sideways"


def test_the_latest_calls_are_one_line_each_at_1280(page, live_server, busy_alice):
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    calls = page.locator("#latest-calls")
    expect(calls).to_contain_text("no-such-model")  # the refused call names the model it asked for
    line = page.evaluate("() => parseFloat(getComputedStyle(document.body).lineHeight)")
    for row in calls.locator("tbody tr").all():
        height = row.bounding_box()["height"]
        assert height < 2 * line, f"a latest-calls row is {height} px high (one line is {line} px)"
    request_id = calls.locator("code.request-id").first
    assert request_id.get_attribute("title") == "req_ffeeddccbbaa99887766554433221100"
    assert request_id.bounding_box()["width"] < 120  # cut to its first characters on screen
    request_id.click()
    assert page.evaluate("() => String(window.getSelection())") == "req_ffeeddccbbaa99887766554433221100"
    assert no_horizontal_scroll(page)
    screenshot(page, "layout-latest-calls-1280")


@pytest.mark.parametrize(
    ("name", "path", "table"),
    [("overview", "/console/", "#latest-calls"), ("usage", "/console/usage/", "#usage")],
)
def test_every_column_of_a_calls_table_is_in_view_at_1280(page, live_server, busy_alice, name, path, table):
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    page.goto(live_server.url + path)
    frame = page.locator(f"{table} >> xpath=..")
    inside = frame.bounding_box()
    widths = frame.evaluate("(element) => [element.scrollWidth, element.clientWidth]")
    screenshot(page, f"calls-table-{name}-1280")

    assert widths[0] <= widths[1], f"the {name} table scrolls inside its frame: {widths}"
    headers = page.locator(f"{table} thead th").all()
    assert [header.inner_text().strip().lower() for header in headers] == [
        "time",
        "model",
        "endpoint",
        "via",
        "status",
        "tokens",
        "amount",
        "request id",
    ]
    for header in headers:
        box = header.bounding_box()
        assert inside["x"] <= box["x"] and box["x"] + box["width"] <= inside["x"] + inside["width"] + 0.5, (
            f"{header.inner_text()} is outside the {name} table's frame: {box} not in {inside}"
        )
    # What is cut to fit is all there in its title; the amounts are shown whole.
    long_model = page.locator(f"{table} .model", has_text="a-rather-long")
    assert long_model.get_attribute("title") == "a-rather-long-chat-model-name-2026-11"
    via = page.locator(f"{table} .via").first
    assert via.inner_text() == "alice laptop" and via.get_attribute("title").endswith("… alice laptop")
    expect(page.locator(f"{table} td.num", has_text="¥0.000024")).to_be_visible()
    amount = page.locator(f"{table} td.num", has_text="¥0.000024").bounding_box()
    assert amount["x"] + amount["width"] <= inside["x"] + inside["width"] + 0.5
