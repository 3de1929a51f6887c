"""A key's limits in a real browser (Debian's chromium, headless, driven by Playwright) against the live
server, at a laptop's width and a phone's (390 px): set with the key, changed on its limits page, a
refusal shown on its field, the spend of the budget's window seen beside the key. Screenshots go to
artifacts/screenshots/key-limits-*.png."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from billing.models import KeyBudgetUsage
from billing.windows import window_start_for
from keys.models import ApiKey
from tests.console.browser import browser_test, screenshot, sign_in

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]

BUDGET = re.compile(r"^Budget \(optional\)$")  # not "Budget period"


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.parametrize("width", [1280, 390])
def test_a_keys_limits_are_set_changed_and_its_window_spend_seen(
    browser_context, live_server, alice, alpha_model, settings, width
):
    settings.GATEWAY_TIMEZONE = "UTC"
    page = browser_context.new_page()
    page.set_viewport_size({"width": width, "height": 844 if width == 390 else 900})
    base = live_server.url
    sign_in(page, base, username="alice", password="alice-password-1")
    page.goto(f"{base}/console/keys/")

    # Set: the limits go with the new key.
    page.get_by_label("Label").fill("agent")
    page.get_by_label(BUDGET).fill("5.00")
    page.get_by_label("Budget period").select_option(label="Per month")
    page.get_by_label("Models").fill("alpha-image-2")
    page.get_by_label("Requests per minute").fill("60")
    page.get_by_label("Allowed IP addresses").fill("10.0.0.0/8")
    assert no_horizontal_scroll(page)
    screenshot(page, f"key-limits-create-{width}")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_text("it will not be shown again")).to_be_visible()
    api_key = ApiKey.objects.get(account=alice, label="agent")
    assert (api_key.budget, api_key.budget_period, api_key.model_ids) == (
        Decimal("5.00"),
        "monthly",
        ["alpha-image-2"],
    )
    assert (api_key.rpm, api_key.allowed_ips) == (60, ["10.0.0.0/8"])

    # See: the spend of the current window, beside the key.
    now = datetime.now(tz=UTC)
    KeyBudgetUsage.objects.create(
        api_key=api_key,
        window="month",
        window_start=window_start_for(window="month", moment=now),
        used=Decimal("1.20"),
    )
    resets = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    page.reload()
    row = page.locator(f'#api-keys tr[data-key-id="{api_key.pk}"]')
    expect(row.get_by_test_id("budget-window")).to_have_text(
        f"¥1.20 of ¥5.00 this month, resets 1 {resets:%b}"
    )
    expect(row).to_contain_text("60 requests a minute")
    expect(row).to_contain_text("From: 10.0.0.0/8")
    assert no_horizontal_scroll(page)
    # Beside the key, in view without scrolling the table sideways, at a phone's width too.
    table = page.locator(".table-scroll").bounding_box()
    for shown in (
        row.get_by_test_id("budget-window"),
        row.get_by_role("link", name=f"Edit limits of {api_key}"),
    ):
        box = shown.bounding_box()
        assert box["x"] + box["width"] <= table["x"] + table["width"], f"{box} is cut off at {width} px"
    screenshot(page, f"key-limits-list-{width}")

    # Change: a refusal comes back on its field, then the change is saved.
    row.get_by_role("link", name=f"Edit limits of {api_key}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Limits of the key")
    expect(page.get_by_test_id("budget-window")).to_contain_text("¥1.20 of ¥5.00 this month")
    expect(page.get_by_label(BUDGET)).to_have_value("5.00")
    page.get_by_label("Models").fill("alpha-image-2, not-a-model")
    page.get_by_role("button", name="Save limits").click()
    models_field = page.locator(".field.has-error")
    expect(models_field).to_contain_text("not-a-model is not a model of the key's group")
    expect(models_field.get_by_label("Models")).to_have_value("alpha-image-2, not-a-model")
    assert no_horizontal_scroll(page)
    screenshot(page, f"key-limits-refused-{width}")
    api_key.refresh_from_db()
    assert api_key.model_ids == ["alpha-image-2"]

    page.get_by_label("Models").fill("")
    page.get_by_label(BUDGET).fill("8")
    page.get_by_label("Requests per minute").fill("")
    page.get_by_label("Tokens per minute").fill("20000")
    page.get_by_role("button", name="Save limits").click()
    expect(page).to_have_url(re.compile(r"/console/keys/$"))
    expect(page.get_by_role("status")).to_contain_text("were saved")
    row = page.locator(f'#api-keys tr[data-key-id="{api_key.pk}"]')
    expect(row.get_by_test_id("budget-window")).to_have_text(
        f"¥1.20 of ¥8.00 this month, resets 1 {resets:%b}"
    )
    expect(row).to_contain_text("20,000 tokens a minute")
    expect(row).not_to_contain_text("requests a minute")
    assert no_horizontal_scroll(page)
    screenshot(page, f"key-limits-changed-{width}")
    api_key.refresh_from_db()
    assert (api_key.budget, api_key.model_ids, api_key.rpm, api_key.tpm) == (Decimal("8"), [], None, 20_000)
