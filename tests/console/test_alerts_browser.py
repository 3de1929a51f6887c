"""The Alerts page in a real browser: an owner sets a floor, percentages and a webhook, copies the
signing secret shown once, shows it again and rotates it; at a phone's width too."""

from __future__ import annotations

from decimal import Decimal
from ipaddress import ip_network

import pytest
from playwright.sync_api import expect

from notifications.models import AlertSettings
from tests.console.browser import browser_test, nav, screenshot, sign_in

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]

HOOK = "http://127.0.0.1:9/hooks/gateway"


@pytest.mark.parametrize("width", [390, 1280])
def test_an_owner_sets_alerts_and_manages_the_signing_secret(
    browser_context, live_server, alice, settings, width
):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.0/8"),)  # the tests' own receiver
    page = browser_context.new_page()
    page.set_viewport_size({"width": width, "height": 844 if width == 390 else 900})
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    if width == 390:
        page.goto(f"{live_server.url}/console/alerts/")
    else:
        nav(page, "Alerts")
    expect(page.get_by_role("heading", name="Alerts", level=1)).to_be_visible()

    page.get_by_label("Balance floor (¥)").fill("2.50")
    page.get_by_label("Budget and cap percentages").fill("50, 90")
    page.get_by_label("Webhook URL").fill(HOOK)
    page.get_by_role("button", name="Save alert settings").click()

    expect(page.get_by_text("Alert settings saved.")).to_be_visible()
    secret = page.get_by_role("textbox", name="Signing secret").input_value()
    stored = AlertSettings.objects.get(account=alice)
    assert secret == stored.webhook_secret and secret.startswith("whsec_")
    assert (stored.balance_floor, stored.percentages, stored.webhook_url) == (Decimal("2.5"), [50, 90], HOOK)
    expect(page.get_by_role("button", name="Copy")).to_be_visible()  # the page's script offers a copy
    screenshot(page, f"alerts-secret-{width}")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")

    page.reload()
    expect(page.get_by_role("textbox", name="Signing secret")).to_have_count(0)  # shown once
    expect(page.get_by_label("Balance floor (¥)")).to_have_value("2.50")
    page.get_by_role("button", name="Show signing secret").click()
    expect(page.get_by_role("textbox", name="Signing secret")).to_have_value(secret)

    page.get_by_role("button", name="Rotate signing secret").click()
    rotated = page.get_by_role("textbox", name="Signing secret").input_value()
    assert rotated != secret and rotated == AlertSettings.objects.get(account=alice).webhook_secret


def test_a_private_webhook_url_is_refused_on_the_page(page, live_server, alice):
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    page.goto(f"{live_server.url}/console/alerts/")
    page.get_by_label("Webhook URL").fill("https://10.0.0.5/hook")
    page.get_by_role("button", name="Save alert settings").click()
    expect(page.get_by_text("This webhook URL is refused")).to_be_visible()
    screenshot(page, "alerts-refused")
    assert not AlertSettings.objects.filter(account=alice).exists()
