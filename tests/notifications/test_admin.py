"""The admin: staff set an account's alerts under the same request-forgery rules; the outbox is
read-only."""

from __future__ import annotations

from decimal import Decimal
from ipaddress import ip_network

from django.utils import timezone

from notifications.models import AlertSettings, Notification


def form_data(account, **fields):
    return {
        "account": account.pk,
        "balance_floor": "",
        "percentages": "[80, 100]",
        "webhook_url": "",
        "email_enabled": "on",
        **fields,
    }


def test_staff_set_an_accounts_alerts_and_a_webhook_gets_its_secret(staff_client, alice, settings):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.0/8"),)
    response = staff_client.post(
        "/admin/notifications/alertsettings/add/",
        form_data(
            alice, balance_floor="2.5", percentages="[100, 50, 50]", webhook_url="http://127.0.0.1:9/h"
        ),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = AlertSettings.objects.get(account=alice)
    assert (stored.balance_floor, stored.percentages, stored.webhook_url) == (
        Decimal("2.5"),
        [50, 100],
        "http://127.0.0.1:9/h",
    )
    assert stored.webhook_secret.startswith("whsec_")


def test_the_admin_refuses_a_private_webhook_url(staff_client, alice):
    response = staff_client.post(
        "/admin/notifications/alertsettings/add/",
        form_data(alice, webhook_url="https://192.168.1.10/hook"),
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors["webhook_url"] == [
        "This webhook URL is refused: the URL's host resolves to a non-public address."
    ]
    assert not AlertSettings.objects.exists()


def test_the_admin_refuses_percentages_out_of_range(staff_client, alice):
    response = staff_client.post(
        "/admin/notifications/alertsettings/add/", form_data(alice, percentages="[0, 120]")
    )
    assert response.status_code == 200
    assert "percentages" in response.context["adminform"].form.errors
    assert not AlertSettings.objects.exists()


def test_the_outbox_is_read_only_in_the_admin(staff_client, alice):
    now = timezone.now()
    event = Notification.objects.create(
        event_id="evt_admin",
        account_id=alice.pk,
        kind="balance.below_floor",
        subject="balance",
        threshold=Decimal("1"),
        window="0",
        payload={"floor": "1.00000000", "available_balance": "0.50000000"},
        created_at=now,
        next_attempt_at=now,
    )
    listing = staff_client.get("/admin/notifications/notification/")
    assert listing.status_code == 200 and b"evt_admin" in listing.content
    page = staff_client.get(f"/admin/notifications/notification/{event.pk}/change/")
    assert page.status_code == 200 and b'name="status"' not in page.content  # shown, not editable
    assert staff_client.get("/admin/notifications/notification/add/").status_code == 403
    refused = staff_client.post(
        f"/admin/notifications/notification/{event.pk}/change/", {"status": "delivered"}
    )
    assert refused.status_code == 403
    assert Notification.objects.get().status == "pending"
