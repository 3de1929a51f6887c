"""The provisioning API's alerts, /v1/admin/accounts/{id}/alerts: staff read and change an account's
alert settings under the rules the console keeps (request-forgery rules for the webhook), each field
sent changed and the others kept; the webhook's signing secret is in the answer that made it, once."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from ipaddress import ip_network

import pytest

from keys.services import api_key_create
from notifications.models import DEFAULT_PERCENTAGES, AlertSettings

pytestmark = pytest.mark.django_db


@pytest.fixture
def send(client, staff, alpha_group):
    staff.account.allowed_groups.add(alpha_group)
    staff_key = api_key_create(account=staff.account, group=alpha_group)[1]

    def call(method: str, account_id: int, body: object = None, *, key: str = staff_key):
        return getattr(client, method)(
            f"/v1/admin/accounts/{account_id}/alerts",
            data=json.dumps(body) if body is not None else None,
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )

    return call


def test_an_account_without_settings_reads_the_defaults(send, alice):
    response = send("get", alice.pk)

    assert response.status_code == 200
    assert response.json() == {
        "object": "alert_settings",
        "account_id": alice.pk,
        "balance_floor": None,
        "percentages": list(DEFAULT_PERCENTAGES),
        "webhook_url": "",
        "webhook_secret_set": False,
        "email_enabled": True,
    }
    assert not AlertSettings.objects.exists()


def test_staff_set_an_accounts_alerts_and_get_the_webhooks_secret_once(send, alice, settings, caplog):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.0/8"),)
    body = {"balance_floor": "2.5", "percentages": [100, 50, 50], "webhook_url": "http://127.0.0.1:9/h"}

    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        response = send("patch", alice.pk, body)
    again = send("patch", alice.pk, {"email_enabled": False})

    assert response.status_code == 200, response.content
    answer = response.json()
    assert (answer["balance_floor"], answer["percentages"], answer["webhook_url"]) == (
        "2.50000000",
        [50, 100],
        "http://127.0.0.1:9/h",
    )
    stored = AlertSettings.objects.get(account=alice)
    assert answer["webhook_secret"] == stored.webhook_secret and stored.webhook_secret.startswith("whsec_")
    assert (stored.balance_floor, stored.percentages, stored.email_enabled) == (
        Decimal("2.5"),
        [50, 100],
        False,
    )
    assert again.status_code == 200 and "webhook_secret" not in again.json()
    assert again.json()["webhook_secret_set"] is True and again.json()["percentages"] == [50, 100]
    assert f"staff=staff action=alert_settings_set target=account:{alice.pk}" in caplog.text
    assert "webhook=127.0.0.1" in caplog.text and "whsec_" not in caplog.text


def test_a_field_sent_as_null_or_empty_takes_its_default(send, alice, settings):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.0/8"),)
    send("patch", alice.pk, {"balance_floor": "1.00", "webhook_url": "http://127.0.0.1:9/h"})

    response = send("patch", alice.pk, {"balance_floor": None, "percentages": None, "webhook_url": ""})

    assert response.status_code == 200
    stored = AlertSettings.objects.get(account=alice)
    assert (stored.balance_floor, stored.percentages, stored.webhook_url) == (None, [], "")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"webhook_url": "https://192.168.1.10/hook"}, "webhook_url"),
        ({"percentages": [0, 120]}, "percentages"),
        ({"balance_floor": "-1"}, "balance_floor"),
        ({"balance_floor": "lots"}, "balance_floor"),
        ({"email_enabled": "yes"}, "email_enabled"),
        ({"percentages": [50, "80"]}, "percentages[1]"),
        ({"percentages": list(range(1, 12))}, "percentages"),
    ],
)
def test_a_refused_value_is_a_400_naming_it_and_changes_nothing(send, alice, body, param):
    response = send("patch", alice.pk, body)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["param"] == param
    assert not AlertSettings.objects.exists()


def test_an_unknown_account_is_a_404(send):
    assert send("get", 999_999).status_code == 404
    assert send("patch", 999_999, {"email_enabled": False}).status_code == 404


def test_a_caller_who_is_not_staff_is_refused(send, alice, alpha_group):
    key = api_key_create(account=alice, group=alpha_group)[1]

    response = send("patch", alice.pk, {"email_enabled": False}, key=key)

    assert response.status_code == 403
    assert not AlertSettings.objects.exists()
