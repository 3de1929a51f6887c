"""The provisioning API for staff automation, /v1/admin/...: over HTTP against a live server, with a
staff user's API key or a staff token with `admin:provision`; refused for everyone else."""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal

import pytest
import requests
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from accounts.models import Account
from billing.models import LedgerEntry, UsageRecord
from keys.models import ApiKey
from keys.services import api_key_create, oauth_token_create


@pytest.fixture
def staff_token(staff) -> str:
    return oauth_token_create(account=staff.account, scopes=["admin:provision"])[1]


@pytest.fixture
def alice_key(alice, alpha_group) -> str:
    return api_key_create(account=alice, group=alpha_group)[1]


def admin_error(response: requests.Response, status: int, code: str) -> dict:
    """The error body of `response`, asserted to have `status` and `code`."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    return error


def test_it_creates_an_account_in_groups(api, staff_key, alpha_group, beta_group, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        response = api(
            "POST",
            "/v1/admin/accounts",
            staff_key,
            json={"username": "team-a", "email": "a@example.com", "groups": [alpha_group.pk, "Beta-API"]},
        )

    assert response.status_code == 201, response.text
    body = response.json()
    account = Account.objects.get(pk=body["id"])
    assert account.user.username == "team-a" and account.user.email == "a@example.com"
    assert not account.user.has_usable_password() and not account.user.is_staff
    assert set(account.allowed_groups.values_list("pk", flat=True)) == {alpha_group.pk, beta_group.pk}
    assert account.current_group_id == alpha_group.pk == body["current_group"]
    assert account.wallet.balance == 0
    assert "staff=staff action=account_create" in caplog.text


def test_it_refuses_to_open_an_account_in_a_disabled_group(api, staff_key, alpha_group, beta_group, caplog):
    beta_group.status = "disabled"
    beta_group.save(update_fields=["status"])

    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        response = api(
            "POST", "/v1/admin/accounts", staff_key, json={"username": "team-b", "groups": [1, "Beta-API"]}
        )

    error = admin_error(response, 400, "group_inactive")
    assert error["param"] == "groups"
    assert "'Beta-API' is disabled" in error["message"]
    assert not Account.objects.filter(user__username="team-b").exists()
    assert "action=account_create" not in caplog.text


def test_it_refuses_a_taken_username_unknown_group_and_stray_current_group(api, staff_key, alice, beta_group):
    admin_error(
        api("POST", "/v1/admin/accounts", staff_key, json={"username": "alice"}), 409, "username_taken"
    )
    error = admin_error(
        api("POST", "/v1/admin/accounts", staff_key, json={"username": "x", "groups": [99]}),
        400,
        "group_not_found",
    )
    assert error["param"] == "groups"
    response = api(
        "POST",
        "/v1/admin/accounts",
        staff_key,
        json={"username": "x", "groups": [1], "current_group": beta_group.pk},
    )
    assert admin_error(response, 400, "invalid_value")["param"] == "current_group"
    admin_error(
        api("POST", "/v1/admin/accounts", staff_key, json={"email": "no-name@example.com"}),
        400,
        "invalid_value",
    )
    assert not Account.objects.filter(user__username="x").exists()


def test_it_creates_lists_and_revokes_keys_with_a_staff_token(api, staff_token, alice, alpha_group, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        created = api(
            "POST",
            f"/v1/admin/accounts/{alice.pk}/keys",
            staff_token,
            json={
                "group": "Alpha-Image",
                "label": "ci",
                "expires_at": (timezone.now() + timedelta(days=1)).isoformat(),
            },
        )
        assert created.status_code == 201, created.text
        secret = created.json()["key"]
        assert api("GET", "/v1/models", secret).status_code == 200  # the new key works

        listed = api("GET", f"/v1/admin/accounts/{alice.pk}/keys", staff_token)
        assert listed.status_code == 200
        [item] = listed.json()["data"]
        assert item["prefix"] == created.json()["prefix"] and secret.startswith(item["prefix"])
        assert item["label"] == "ci" and item["group"]["id"] == alpha_group.pk and item["state"] == "active"
        assert item["last_used_at"] is not None
        assert secret not in listed.text and "key" not in item

        revoked = api("POST", f"/v1/admin/keys/{item['id']}/revoke", staff_token)
        assert revoked.status_code == 200 and revoked.json()["revoked"] is True
        assert revoked.json()["state"] == "revoked"
        assert api("POST", f"/v1/admin/keys/{item['id']}/revoke", staff_token).json()["revoked"] is False

    assert ApiKey.objects.get(pk=item["id"]).revoked_at is not None
    admin_error(api("GET", "/v1/models", secret), 401, "revoked_api_key")
    assert f"staff=staff action=api_key_create target=api_key:{item['id']}" in caplog.text
    assert f"staff=staff action=api_key_revoke target=api_key:{item['id']}" in caplog.text


def test_it_refuses_a_key_in_a_group_the_account_may_not_use(api, staff_key, alice, beta_group):
    response = api("POST", f"/v1/admin/accounts/{alice.pk}/keys", staff_key, json={"group": beta_group.pk})

    assert admin_error(response, 400, "group_not_allowed")["param"] == "group"
    assert not ApiKey.objects.filter(account=alice).exists()


def test_it_tops_up_exactly_once_per_idempotency_key(api, staff_key, staff, alice):
    path = f"/v1/admin/accounts/{alice.pk}/topups"
    before = alice.wallet.balance
    body = {"amount": "10.10", "note": "invoice 7", "reference": "inv-7"}

    first = api("POST", path, staff_key, json=body, headers={"Idempotency-Key": "topup-1"})
    again = api("POST", path, staff_key, json=body, headers={"Idempotency-Key": "topup-1"})

    assert first.status_code == again.status_code == 201, first.text
    assert first.json() == again.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert first.json()["amount"] == "10.10000000" and first.json()["created_by"] == "staff"
    [entry] = LedgerEntry.objects.filter(wallet__account=alice, created_by__isnull=False)
    assert entry.amount == Decimal("10.10") and entry.note == "invoice 7" and entry.reference == "inv-7"
    assert entry.created_by_id == staff.pk
    other = api(
        "POST", path, staff_key, json={**body, "amount": "20"}, headers={"Idempotency-Key": "topup-1"}
    )
    admin_error(other, 422, "idempotency_key_reused")
    assert api("POST", path, staff_key, json=body).status_code == 201  # no key: a second top-up
    alice.wallet.refresh_from_db()
    assert alice.wallet.balance == before + Decimal("20.20")


@pytest.mark.parametrize("amount", ["0", "-5", "ten", "0.000000001", "NaN", 10.5, 10, "9" * 30, "1e400"])
def test_it_refuses_a_bad_amount(api, staff_key, alice, amount):
    response = api(
        "POST", f"/v1/admin/accounts/{alice.pk}/topups", staff_key, json={"amount": amount, "note": "x"}
    )

    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "amount"
    assert not LedgerEntry.objects.filter(created_by__isnull=False).exists()


MALFORMED = [
    ("/v1/admin/accounts", {"username": "a b"}, "username"),
    ("/v1/admin/accounts", {"username": "x", "groups": [1, True]}, "groups[1]"),
    ("/v1/admin/accounts", {"username": "x", "email": "nope"}, "email"),
    ("/v1/admin/accounts/{alice}/keys", {}, "group"),
    ("/v1/admin/accounts/{alice}/keys", {"group": 1, "expires_at": "tomorrow"}, "expires_at"),
    ("/v1/admin/accounts/{alice}/topups", {"amount": "1"}, "note"),
    ("/v1/admin/accounts/{alice}/topups", {"amount": "1", "note": "   "}, "note"),
    ("/v1/admin/accounts/{alice}/topups", {"amount": 1, "note": "n"}, "amount"),
]


@pytest.mark.parametrize(("path", "body", "param"), MALFORMED, ids=[m[2] for m in MALFORMED])
def test_it_refuses_a_malformed_body_naming_the_field_and_writes_nothing(
    api, staff_key, alice, path, body, param
):
    accounts = Account.objects.count()

    response = api("POST", path.format(alice=alice.pk), staff_key, json=body)

    error = admin_error(response, 400, "invalid_value")
    assert error["param"] == param
    assert f"`{param.split('[')[0]}`" in error["message"]
    assert Account.objects.count() == accounts
    assert not ApiKey.objects.filter(account=alice).exists()
    assert not LedgerEntry.objects.filter(created_by__isnull=False).exists()


def test_it_reads_usage_totals_and_pages_of_records(api, staff_key, alice, alpha_group):
    now = timezone.now()
    for n in (2, 1, 0):  # logged in time order: req_0 is the latest
        UsageRecord.objects.create(
            request_id=f"req_{n}",
            account=alice,
            credential="api_key:1",
            group=alpha_group,
            model_id="alpha-image-1",
            endpoint="images.generations",
            billing="balance",
            status=200,
            amount=Decimal("0.25"),
            latency_ms=10,
            created_at=now - timedelta(hours=n),
        )
    path = f"/v1/admin/accounts/{alice.pk}/usage"

    first = api("GET", path, staff_key, params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert page["totals"]["calls"] == 3 and page["totals"]["amount"] == "0.75000000"
    assert [record["request_id"] for record in page["data"]] == ["req_0", "req_1"]  # newest first
    assert page["has_more"] is True
    rest = api("GET", path, staff_key, params={"limit": 2, "before_id": page["next_before_id"]}).json()
    assert len(rest["data"]) == 1 and rest["has_more"] is False
    window = {
        "from": (now - timedelta(minutes=90)).isoformat(),
        "to": (now + timedelta(minutes=1)).isoformat(),
    }
    assert api("GET", path, staff_key, params=window).json()["totals"]["calls"] == 2
    assert (
        admin_error(api("GET", path, staff_key, params={"from": "yesterday"}), 400, "invalid_value")["param"]
        == "from"
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/admin/accounts"),
        ("GET", "/v1/admin/accounts/{id}/keys"),
        ("POST", "/v1/admin/accounts/{id}/keys"),
        ("POST", "/v1/admin/keys/1/revoke"),
        ("PATCH", "/v1/admin/keys/1"),
        ("POST", "/v1/admin/accounts/{id}/topups"),
        ("GET", "/v1/admin/accounts/{id}/usage"),
    ],
)
def test_it_refuses_everyone_but_staff(api, alice, alice_key, staff, method, path):
    path = path.replace("{id}", str(alice.pk))
    body = {"amount": "5", "note": "x", "group": 1, "username": "mallory"}

    admin_error(api(method, path, None, json=body), 401, "missing_api_key")
    admin_error(api(method, path, "sk-not-a-key", json=body), 401, "invalid_api_key")
    assert (
        admin_error(api(method, path, alice_key, json=body), 403, "staff_required")["type"]
        == "permission_error"
    )
    plain_staff_token = oauth_token_create(account=staff.account, scopes=["profile:read"])[1]
    admin_error(api(method, path, plain_staff_token, json=body), 403, "insufficient_scope")
    assert (
        not LedgerEntry.objects.filter(created_by__isnull=False).exists()
        and not Account.objects.filter(user__username="mallory").exists()
    )


def test_it_refuses_a_staff_credential_once_the_user_is_no_longer_staff(api, staff, staff_token, staff_key):
    staff.is_staff = False
    staff.save(update_fields=["is_staff"])

    admin_error(api("GET", f"/v1/admin/accounts/{staff.account.pk}/keys", staff_token), 403, "staff_required")
    admin_error(api("GET", f"/v1/admin/accounts/{staff.account.pk}/keys", staff_key), 403, "staff_required")


def test_it_answers_404_for_an_unknown_account_or_key(api, staff_key):
    admin_error(api("GET", "/v1/admin/accounts/9999/keys", staff_key), 404, "account_not_found")
    admin_error(
        api("POST", "/v1/admin/accounts/9999/topups", staff_key, json={"amount": "1", "note": "x"}),
        404,
        "account_not_found",
    )
    admin_error(api("GET", "/v1/admin/accounts/9999/usage", staff_key), 404, "account_not_found")
    admin_error(api("POST", "/v1/admin/keys/9999/revoke", staff_key), 404, "api_key_not_found")


def test_admin_provision_is_issued_to_staff_only(alice, staff):
    with pytest.raises(ValueError, match="only staff"):
        oauth_token_create(account=alice, scopes=["admin:provision"])
    with pytest.raises(CommandError, match="only staff"):
        call_command("createtoken", "alice", "--scopes", "admin:provision")
    assert oauth_token_create(account=staff.account, scopes=["admin:provision"])[0].scope == "admin:provision"
