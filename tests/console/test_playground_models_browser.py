"""The playground's model-aware choices in a real browser (chromium, Playwright), at desktop and
phone widths, with and without the page's script. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from billing.models import UsageRecord
from tests.console.browser import browser_test, screenshot, sign_in
from tests.factories import image_model_make

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": 1280, "phone": 390}


@pytest.fixture
def square_model(alpha_group, demo_upstream):
    return image_model_make(
        model_id="square-image",
        group=alpha_group,
        upstreams=[demo_upstream],
        sizes=["512x512"],
        qualities=[],
        output_formats=[],
        max_n=1,
    )


def _values(page, field: str) -> list[str]:
    return page.locator(f"#id_{field}").evaluate("s => [...s.options].map(o => o.value)")


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_the_choices_follow_the_selected_model(page, live_server, alice, alpha_model, square_model, width):
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    page.goto(f"{live_server.url}/console/playground/")
    expect(page.get_by_role("button", name="Choose model")).to_be_hidden()  # the script adapts instead
    assert _values(page, "quality") == ["", "low", "high"]

    page.get_by_label("Model").select_option(label="square-image — Alpha-Image, ¥0.02 per call")

    assert _values(page, "size") == ["", "512x512"]
    expect(page.locator("#id_quality")).to_be_hidden()
    expect(page.locator("#id_output_format")).to_be_hidden()
    assert page.get_by_label("Number of images").get_attribute("max") == "1"
    screenshot(page, f"playground-model-choices-{width}")
    page.get_by_label("Prompt").fill("a square lighthouse")
    page.get_by_label("Size").select_option("512x512")
    page.get_by_role("button", name="Generate").click()

    expect(page.locator("ul.images img")).to_have_count(1, timeout=60_000)
    assert UsageRecord.objects.get(account=alice).model_id == "square-image"
    screenshot(page, f"playground-model-result-{width}")

    page.get_by_label("Model").select_option(label="alpha-image-2 — Alpha-Image, ¥0.15 per call")
    assert _values(page, "quality") == ["", "low", "high"]
    expect(page.locator("#id_quality")).to_be_visible()


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_without_script_choose_model_shows_its_choices(
    live_server, alice, alpha_model, square_model, width, browser_contexts
):
    context = browser_contexts(viewport={"width": width, "height": 900}, java_script_enabled=False)
    page = context.new_page()
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    page.goto(f"{live_server.url}/console/playground/")
    page.get_by_label("Model").select_option(label="square-image — Alpha-Image, ¥0.02 per call")
    page.get_by_label("Prompt").fill("kept across the choice")
    assert _values(page, "size") != ["", "512x512"]  # no script: nothing adapts yet

    page.get_by_role("button", name="Choose model").click()

    assert _values(page, "size") == ["", "512x512"]
    expect(page.locator("#id_quality")).to_be_hidden()
    expect(page.get_by_label("Prompt")).to_have_value("kept across the choice")
    screenshot(page, f"playground-choose-model-nojs-{width}")
    assert not UsageRecord.objects.filter(account=alice).exists()
