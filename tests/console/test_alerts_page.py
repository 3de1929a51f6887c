"""The Alerts page: the owner sets the floor, the percentages and the webhook (its signing secret shown
when made, on request and when rotated), and sees the account's recent alerts with their delivery."""

from __future__ import annotations

from decimal import Decimal
from ipaddress import ip_network

import pytest
from django.utils import timezone

from notifications.models import AlertSettings, Notification

HOOK = "http://127.0.0.1:9/hooks"


@pytest.fixture
def loopback_allowed(settings):
    """The tests' receivers live on 127.0.0.1: allowed as the operator's own network."""
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.0/8"),)


def event_make(account, *, status="pending", attempts=0, last_error="", subject="balance", window="0"):
    now = timezone.now()
    return Notification.objects.create(
        event_id=f"evt_{subject}_{window}",
        account_id=account.pk,
        kind="balance.below_floor",
        subject=subject,
        threshold=Decimal("5"),
        window=window,
        payload={"floor": "5.00000000", "available_balance": "4.90000000"},
        created_at=now,
        next_attempt_at=now,
        status=status,
        attempts=attempts,
        last_error=last_error,
    )


def test_it_shows_the_defaults_for_an_account_without_settings(alice_client):
    response = alice_client.get("/console/alerts/")
    assert response.status_code == 200
    form = response.context["form"]
    assert form.initial == {
        "balance_floor": "",
        "percentages": "80, 100",
        "webhook_url": "",
        "email_enabled": True,
    }
    assert b"No alerts yet." in response.content
    assert b'aria-current="page">Alerts<' in response.content


def test_it_saves_the_thresholds_and_makes_a_secret_shown_after_the_redirect(
    alice_client, alice, loopback_allowed
):
    response = alice_client.post(
        "/console/alerts/",
        {"balance_floor": "5.50", "percentages": "50, 90,100", "webhook_url": HOOK, "email_enabled": "on"},
    )
    assert response.status_code == 302
    stored = AlertSettings.objects.get(account=alice)
    assert (stored.balance_floor, stored.percentages, stored.webhook_url, stored.email_enabled) == (
        Decimal("5.5"),
        [50, 90, 100],
        HOOK,
        True,
    )
    assert stored.webhook_secret.startswith("whsec_")

    page = alice_client.get("/console/alerts/")
    assert page.context["secret"] == stored.webhook_secret
    assert stored.webhook_secret.encode() in page.content
    again = alice_client.get("/console/alerts/")
    assert again.context["secret"] is None and stored.webhook_secret.encode() not in again.content
    assert again.context["form"].initial["balance_floor"] == "5.50"


def test_the_secret_can_be_shown_again_and_rotated(alice_client, alice, loopback_allowed):
    alice_client.post("/console/alerts/", {"percentages": "80", "webhook_url": HOOK})
    first = AlertSettings.objects.get(account=alice).webhook_secret
    alice_client.get("/console/alerts/")  # shown once

    alice_client.post("/console/alerts/", {"action": "reveal"})
    assert alice_client.get("/console/alerts/").context["secret"] == first

    alice_client.post("/console/alerts/", {"action": "rotate"})
    rotated = AlertSettings.objects.get(account=alice).webhook_secret
    assert rotated != first and rotated.startswith("whsec_")
    assert alice_client.get("/console/alerts/").context["secret"] == rotated
    # Saving the settings again keeps the secret.
    alice_client.post("/console/alerts/", {"percentages": "80", "webhook_url": HOOK})
    assert AlertSettings.objects.get(account=alice).webhook_secret == rotated


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hooks",
        "https://10.1.2.3/hooks",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hooks",
        "https://localhost/hooks",
        "http://user@example.com/hooks",
        "ftp://example.com/hooks",
    ],
)
def test_a_webhook_url_the_forgery_rules_refuse_is_not_saved(alice_client, alice, url):
    response = alice_client.post("/console/alerts/", {"percentages": "80", "webhook_url": url})
    assert response.status_code == 400
    assert response.context["form"].errors["webhook_url"][0].startswith("This webhook URL is refused")
    assert not AlertSettings.objects.filter(account=alice).exists()


def test_plain_http_is_refused_unless_the_address_is_the_operators_own(alice_client, alice):
    response = alice_client.post("/console/alerts/", {"percentages": "80", "webhook_url": HOOK})
    assert response.status_code == 400
    assert not AlertSettings.objects.filter(account=alice).exists()


@pytest.mark.parametrize(
    ("field", "data"),
    [
        ("balance_floor", {"balance_floor": "-1"}),
        ("balance_floor", {"balance_floor": "abc"}),
        ("balance_floor", {"balance_floor": "0.000000001"}),
        ("balance_floor", {"balance_floor": "9" * 30}),
        ("balance_floor", {"balance_floor": "1e400"}),
        ("percentages", {"percentages": "0"}),
        ("percentages", {"percentages": "101"}),
        ("percentages", {"percentages": "eighty"}),
    ],
)
def test_bad_thresholds_are_refused_with_the_field_named(alice_client, alice, field, data):
    response = alice_client.post("/console/alerts/", {"percentages": "80", **data})
    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert not AlertSettings.objects.filter(account=alice).exists()


def test_it_lists_the_accounts_own_alerts_with_their_delivery(alice_client, alice, bob):
    event_make(alice, status="delivered", attempts=1, window="0")
    event_make(alice, status="pending", attempts=2, last_error="webhook: HTTP 500", window="1")
    event_make(bob, window="7")
    response = alice_client.get("/console/alerts/")
    rows = list(response.context["notifications"])
    assert [(n.window, n.status, n.attempts) for n in rows] == [("1", "pending", 2), ("0", "delivered", 1)]
    assert b"webhook: HTTP 500" in response.content
    assert b"evt_balance_7" not in response.content


def test_the_page_needs_a_signed_in_user(client):
    response = client.get("/console/alerts/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
