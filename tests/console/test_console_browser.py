"""The console in a real browser (Debian's chromium, headless, driven by Playwright) against the live
server, with the official `openai` SDK making the API calls. Each test saves screenshots of the pages
it visits under artifacts/screenshots/."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import openai
import pytest
from playwright.sync_api import expect

from billing.models import UsageRecord, Wallet
from keys.models import ApiKey
from tests.console.browser import browser_test, nav, screenshot, sign_in

pytestmark = [browser_test, pytest.mark.django_db(transaction=True)]


def test_a_key_made_in_the_console_calls_the_api_until_it_is_revoked(
    request, page, live_server, alice, alpha_model
):
    base = live_server.url
    page.goto(f"{base}/console/keys/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/console/keys/$"))
    screenshot(page, "login")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-password-1")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="API keys", level=1)).to_be_visible()

    page.get_by_label("Label").fill("browser test")
    page.get_by_label("Group").select_option(label="Alpha-Image (images, wallet balance)")
    page.get_by_label("Expires").select_option(label="In 30 days")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_text("it will not be shown again")).to_be_visible()
    expect(page.get_by_role("button", name="Copy")).to_be_visible()  # shown by the page's script
    secret = page.get_by_label("Key for Alpha-Image").input_value()
    assert re.fullmatch(r"sk-[0-9A-Za-z]{49}", secret)
    screenshot(page, "keys-new-key")
    expect(page).to_have_url(f"{base}/console/keys/")  # redirected: a reload is a GET
    api_key = ApiKey.objects.get(account=alice, label="browser test")
    assert secret.startswith(api_key.prefix) and api_key.expires_at is not None

    page.reload()
    expect(page.get_by_role("heading", name="API keys", level=1)).to_be_visible()
    expect(page.get_by_label("Key for Alpha-Image")).to_have_count(0)
    assert secret not in page.content()
    assert ApiKey.objects.filter(account=alice).count() == 1
    screenshot(page, "keys-after-reload")

    client = openai.OpenAI(base_url=f"{base}/v1", api_key=secret, max_retries=0)
    request.addfinalizer(client.close)  # its keep-alive connection holds a live-server thread open
    result = client.images.generate(
        model="alpha-image-2", prompt="a red bicycle", size="1024x1024", response_format="b64_json"
    )
    assert len(result.data) == 1 and result.data[0].b64_json
    request_id = UsageRecord.objects.get(account=alice, status=200).request_id

    nav(page, "Overview")
    calls = page.locator("#latest-calls")
    expect(calls).to_contain_text(request_id)
    expect(calls).to_contain_text("alpha-image-2")
    expect(calls.locator(".via").first).to_have_text(
        "browser test"
    )  # the key's label; all of it in the title
    expect(calls.locator(".via").first).to_have_attribute("title", f"{api_key.prefix}… browser test")
    expect(page.get_by_test_id("balance")).to_have_text("¥9.85")
    expect(page.get_by_test_id("spend-total")).to_have_text("¥0.15")
    screenshot(page, "overview")

    nav(page, "API keys")
    expect(page.get_by_label("Key for Alpha-Image")).to_have_count(0)  # the secret is not shown again
    assert secret not in page.content()
    page.get_by_role("link", name=f"Revoke {api_key}").click()
    screenshot(page, "key-revoke")
    page.get_by_role("button", name="Revoke key").click()
    expect(page.get_by_role("status")).to_contain_text("was revoked")
    expect(page.locator(f'tr[data-key-id="{api_key.pk}"]')).to_contain_text("revoked")
    screenshot(page, "keys")

    with pytest.raises(openai.AuthenticationError) as refused:
        client.images.generate(model="alpha-image-2", prompt="a red bicycle", response_format="b64_json")
    assert refused.value.status_code == 401
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


def test_the_playground_shows_the_generated_image(page, live_server, alice, alpha_model):
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    nav(page, "Image playground")
    screenshot(page, "playground-empty")

    page.get_by_label("Model").select_option(label="alpha-image-2 — Alpha-Image, ¥0.15 per call")
    page.get_by_label("Prompt").fill("a lighthouse on a cliff at dusk")
    page.get_by_label("Size").select_option("1024x1024")
    page.get_by_label("Number of images").fill("2")
    page.get_by_role("button", name="Generate").click()

    images = page.locator("ul.images img")
    expect(images).to_have_count(2, timeout=60_000)
    for index in range(2):
        image = images.nth(index)
        assert image.get_attribute("src").startswith("/files/images/")  # a hosted image, by reference
        # Decoded and laid out by the browser: a broken image has no natural width.
        assert image.evaluate("img => img.complete && img.naturalWidth") > 0
    expect(page.locator("#playground-charge")).to_contain_text("charged ¥0.15")
    screenshot(page, "playground")
    record = UsageRecord.objects.get(account=alice)
    assert record.credential == f"console:{alice.pk}" and record.status == 200
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
    expect(page).to_have_url(f"{live_server.url}/console/playground/result/{record.request_id}/")

    page.reload()  # the result page is a GET: reloading shows it again, it does not call again
    expect(page.locator("ul.images img")).to_have_count(2)
    expect(page.locator("#playground-charge")).to_contain_text("charged ¥0.15")
    assert UsageRecord.objects.filter(account=alice).count() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")

    nav(page, "Overview")
    expect(page.locator("#latest-calls")).to_contain_text(record.request_id)
    expect(page.locator("#latest-calls")).to_contain_text("Playground")


def test_the_playground_shows_progress_then_a_plain_error(page, live_server, bob, alpha_model):
    sign_in(page, live_server.url, username="bob", password="bob-password-1")
    page.goto(f"{live_server.url}/console/playground/")
    # Record what the page shows the moment the form is sent (this listener runs after the page's
    # own); sessionStorage keeps it across the navigation to the answer.
    page.locator("form[data-progress]").evaluate(
        """form => form.addEventListener("submit", () => {
            const progress = document.getElementById("playground-progress");
            sessionStorage.setItem("at-submit", JSON.stringify({
                shown: !progress.hidden && getComputedStyle(progress).display !== "none",
                text: progress.innerText,
                disabled: form.querySelector("button[type=submit]").disabled,
                busy: document.getElementById("playground-result").getAttribute("aria-busy"),
            }));
        })"""
    )
    page.get_by_label("Prompt").fill("a lighthouse")
    page.get_by_role("button", name="Generate").click()

    expect(page.get_by_role("alert")).to_contain_text("Your balance or plan does not cover this call")
    screenshot(page, "playground-error")
    at_submit = json.loads(page.evaluate("() => sessionStorage.getItem('at-submit')"))
    assert at_submit == {
        "shown": True,
        "text": "Generating… this can take up to a minute.",
        "disabled": True,
        "busy": "true",
    }
    assert UsageRecord.objects.get(account=bob).amount == 0


def test_a_staff_top_up_in_the_admin_shows_in_the_console(browser_context, live_server, staff, alice):
    base = live_server.url
    admin = browser_context.new_page()
    admin.goto(f"{base}/admin/login/?next=/admin/billing/wallet/")
    admin.get_by_label("Username").fill("staff")
    admin.get_by_label("Password").fill("staff-password-1")
    admin.get_by_role("button", name="Log in").click()
    wallet = Wallet.objects.get(account=alice)
    admin.locator(f'input[name="_selected_action"][value="{wallet.pk}"]').check()
    admin.locator('select[name="action"]').select_option("top_up")
    admin.get_by_role("button", name="Go").click()
    admin.get_by_label("Amount").fill("5.00")
    admin.get_by_label("Note").fill("browser test top-up")
    screenshot(admin, "admin-top-up")
    admin.get_by_role("button", name="Confirm").click()
    expect(admin.locator(".messagelist")).to_contain_text("written to 1 wallet")

    # A separate browser context: alice's own session, not the staff user's.
    console = browser_context.browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(console, base, username="alice", password="alice-password-1")
    expect(console.get_by_test_id("balance")).to_have_text("¥15.00")
    expect(console.get_by_test_id("available")).to_have_text("¥15.00")
    screenshot(console, "overview-after-top-up")
    console.context.close()


def test_the_authorized_applications_page(page, live_server, alice):
    from keys.services import oauth_token_create

    oauth_token_create(account=alice, scopes=["profile:read"])
    sign_in(page, live_server.url, username="alice", password="alice-password-1")
    nav(page, "Authorized applications")
    row = page.get_by_role("row", name=re.compile("Issued by an operator"))
    expect(row).to_contain_text("profile:read")
    screenshot(page, "applications")
    row.get_by_role("link", name=re.compile("Revoke")).click()
    page.get_by_role("button", name="Revoke access").click()
    expect(page.get_by_text("No application holds a token for your account.")).to_be_visible()
