"""A key's own limits through the provisioning API: set at creation (`POST /v1/admin/accounts/{id}/keys`),
changed with `PATCH /v1/admin/keys/{id}` (absent = unchanged, null = unset), returned by both and by the
key list; refused with the field in `param`. Over HTTP against a live server, as staff automation calls."""

from __future__ import annotations

import logging
from decimal import Decimal
from ipaddress import ip_network

import pytest

from keys.authentication import credential_verify
from keys.models import ApiKey
from keys.services import ApiKeyLimitsInput, api_key_create, oauth_token_create
from tests.api.test_admin_api import admin_error

LIMITS = {
    "budget": "5.00",
    "budget_period": "monthly",
    "models": ["alpha-image-2"],
    "rpm": 60,
    "tpm": 100000,
    "allowed_ips": ["10.1.2.3/8", "2001:db8::1"],
}


@pytest.fixture
def limited_key(alice, alpha_group, alpha_model) -> ApiKey:
    return api_key_create(
        account=alice,
        group=alpha_group,
        label="agent",
        limits=ApiKeyLimitsInput(
            budget="5.00",
            budget_period="monthly",
            model_ids=["alpha-image-2"],
            rpm=60,
            tpm=1000,
            allowed_ips=["10.0.0.0/8"],
        ),
    )[0]


def test_a_key_is_created_with_its_limits_stored_and_returned(
    api, staff_key, alice, alpha_group, alpha_model
):
    response = api(
        "POST", f"/v1/admin/accounts/{alice.pk}/keys", staff_key, json={"group": alpha_group.pk, **LIMITS}
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert {name: body[name] for name in LIMITS} == {
        "budget": "5.00000000",
        "budget_period": "monthly",
        "models": ["alpha-image-2"],
        "rpm": 60,
        "tpm": 100000,
        "allowed_ips": ["10.0.0.0/8", "2001:db8::1/128"],
    }
    api_key = ApiKey.objects.get(pk=body["id"])
    assert (api_key.budget, api_key.budget_period, api_key.model_ids) == (
        Decimal("5.00"),
        "monthly",
        ["alpha-image-2"],
    )
    assert (api_key.rpm, api_key.tpm, api_key.allowed_ips) == (60, 100000, ["10.0.0.0/8", "2001:db8::1/128"])
    listed = api("GET", f"/v1/admin/accounts/{alice.pk}/keys", staff_key).json()["data"]
    assert [(item["id"], item["budget"], item["models"]) for item in listed] == [
        (api_key.pk, "5.00000000", ["alpha-image-2"])
    ]


def test_a_key_made_without_limits_shows_them_unset(api, staff_key, alice, alpha_group):
    response = api("POST", f"/v1/admin/accounts/{alice.pk}/keys", staff_key, json={"group": alpha_group.pk})

    assert response.status_code == 201, response.text
    body = response.json()
    assert {name: body[name] for name in LIMITS} == {
        "budget": None,
        "budget_period": None,
        "models": [],
        "rpm": None,
        "tpm": None,
        "allowed_ips": [],
    }
    api_key = ApiKey.objects.get(pk=body["id"])
    assert (api_key.budget, api_key.budget_period, api_key.model_ids, api_key.rpm) == (None, "", [], None)


@pytest.mark.parametrize(
    ("limits", "param"),
    [
        ({"budget": "-1"}, "budget"),
        ({"budget": "five", "budget_period": "daily"}, "budget"),
        ({"budget": 5, "budget_period": "daily"}, "budget"),  # an amount is a string
        ({"budget": "5.00"}, "budget_period"),
        ({"budget": "5.00", "budget_period": "hourly"}, "budget_period"),
        ({"budget_period": "daily"}, "budget"),
        ({"rpm": 0}, "rpm"),
        ({"rpm": 2**31}, "rpm"),  # more than the column holds
        ({"tpm": "100"}, "tpm"),
        ({"models": "alpha-image-2"}, "models"),
        ({"models": ["beta-imagine-image"]}, "models"),  # a model of another group
        ({"allowed_ips": ["10.0.0.300/8"]}, "allowed_ips"),
    ],
)
def test_a_key_with_a_bad_limit_is_refused_naming_the_field_and_not_made(
    api, staff_key, alice, alpha_group, alpha_model, beta_model, limits, param
):
    response = api(
        "POST", f"/v1/admin/accounts/{alice.pk}/keys", staff_key, json={"group": alpha_group.pk, **limits}
    )

    error = admin_error(response, 400, "invalid_value")
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert not ApiKey.objects.filter(account=alice).exists()


def test_an_unknown_model_is_refused_naming_it(api, staff_key, alice, alpha_group, alpha_model):
    response = api(
        "POST",
        f"/v1/admin/accounts/{alice.pk}/keys",
        staff_key,
        json={"group": alpha_group.pk, "models": ["alpha-image-2", "no-such-model", "beta-imagine-image"]},
    )

    error = admin_error(response, 400, "invalid_value")
    assert error["param"] == "models"
    assert "beta-imagine-image, no-such-model are not models of the key's group" in error["message"]
    assert "alpha-image-2" in error["message"].split("its models:")[1]
    assert not ApiKey.objects.filter(account=alice).exists()


def test_patch_changes_the_fields_sent_and_keeps_the_others(api, staff_key, limited_key, caplog):
    with caplog.at_level(logging.INFO, logger="gateway.audit"):
        response = api(
            "PATCH",
            f"/v1/admin/keys/{limited_key.pk}",
            staff_key,
            json={"budget": "12.50", "rpm": 120, "allowed_ips": ["192.168.1.0/24"]},
        )

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["id"], body["label"], body["state"], body["group"]["id"]) == (
        limited_key.pk,
        "agent",
        "active",
        limited_key.group_id,
    )
    assert {name: body[name] for name in LIMITS} == {
        "budget": "12.50000000",
        "budget_period": "monthly",
        "models": ["alpha-image-2"],
        "rpm": 120,
        "tpm": 1000,
        "allowed_ips": ["192.168.1.0/24"],
    }
    limited_key.refresh_from_db()
    assert (limited_key.budget, limited_key.budget_period, limited_key.rpm, limited_key.tpm) == (
        Decimal("12.50"),
        "monthly",
        120,
        1000,
    )
    assert limited_key.allowed_ips == ["192.168.1.0/24"] and limited_key.model_ids == ["alpha-image-2"]
    assert (
        f"staff=staff action=api_key_limits_set target=api_key:{limited_key.pk} "
        f"account={limited_key.account_id}" in caplog.text
    )
    assert "changed=budget,rpm,allowed_ips" in caplog.text


def test_patch_with_null_unsets_a_limit_and_a_null_budget_its_period(api, staff_key, limited_key):
    response = api(
        "PATCH",
        f"/v1/admin/keys/{limited_key.pk}",
        staff_key,
        json={"budget": None, "models": None, "rpm": None, "allowed_ips": []},
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["budget"], body["budget_period"], body["models"], body["rpm"], body["tpm"]) == (
        None,
        None,
        [],
        None,
        1000,
    )
    assert body["allowed_ips"] == []
    limited_key.refresh_from_db()
    assert (limited_key.budget, limited_key.budget_period, limited_key.model_ids, limited_key.rpm) == (
        None,
        "",
        [],
        None,
    )
    assert (limited_key.tpm, limited_key.allowed_ips) == (1000, [])


def test_patch_with_an_empty_body_changes_nothing(api, staff_key, limited_key):
    response = api("PATCH", f"/v1/admin/keys/{limited_key.pk}", staff_key, json={})

    assert response.status_code == 200, response.text
    assert response.json()["budget"] == "5.00000000" and response.json()["rpm"] == 60
    limited_key.refresh_from_db()
    assert (limited_key.budget, limited_key.rpm, limited_key.model_ids) == (
        Decimal("5"),
        60,
        ["alpha-image-2"],
    )


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"budget_period": None}, "budget_period"),  # the budget stays, without a period
        ({"budget_period": "fortnightly"}, "budget_period"),
        ({"tpm": -5}, "tpm"),
        ({"models": ["no-such-model"]}, "models"),
        ({"allowed_ips": ["everywhere"]}, "allowed_ips"),
        ({"rpm": True}, "rpm"),
        ({"tpm": 2**70}, "tpm"),  # more than the column holds
    ],
)
def test_patch_refuses_a_bad_limit_naming_the_field_and_changes_nothing(
    api, staff_key, limited_key, change, param
):
    response = api("PATCH", f"/v1/admin/keys/{limited_key.pk}", staff_key, json=change)

    assert admin_error(response, 400, "invalid_value")["param"] == param
    limited_key.refresh_from_db()
    assert (limited_key.budget, limited_key.budget_period, limited_key.tpm, limited_key.rpm) == (
        Decimal("5"),
        "monthly",
        1000,
        60,
    )
    assert limited_key.model_ids == ["alpha-image-2"] and limited_key.allowed_ips == ["10.0.0.0/8"]


def test_patch_refuses_a_body_that_is_not_an_object(api, staff_key, limited_key):
    response = api("PATCH", f"/v1/admin/keys/{limited_key.pk}", staff_key, json=["rpm", 5])

    assert response.status_code == 400, response.text
    limited_key.refresh_from_db()
    assert limited_key.rpm == 60


def test_patch_answers_404_for_an_unknown_key(api, staff_key):
    admin_error(api("PATCH", "/v1/admin/keys/9999", staff_key, json={"rpm": 5}), 404, "api_key_not_found")


def test_patch_is_refused_to_everyone_but_staff(api, alice, limited_key, staff):
    own_key = api_key_create(account=alice, group=limited_key.group)[1]
    path = f"/v1/admin/keys/{limited_key.pk}"

    admin_error(api("PATCH", path, None, json={"rpm": None}), 401, "missing_api_key")
    assert admin_error(api("PATCH", path, own_key, json={"rpm": None}), 403, "staff_required")["type"] == (
        "permission_error"
    )
    plain_staff_token = oauth_token_create(account=staff.account, scopes=["profile:read"])[1]
    admin_error(api("PATCH", path, plain_staff_token, json={"rpm": None}), 403, "insufficient_scope")
    limited_key.refresh_from_db()
    assert limited_key.rpm == 60


def test_a_patch_applies_from_the_keys_next_authentication(api, staff_key, alice, alpha_group):
    api_key, secret = api_key_create(account=alice, group=alpha_group)
    assert api("GET", "/v1/models", secret).status_code == 200  # the credential is cached now
    assert credential_verify(secret=secret).limits.allowed_networks == ()

    changed = api("PATCH", f"/v1/admin/keys/{api_key.pk}", staff_key, json={"allowed_ips": ["192.0.2.0/24"]})
    assert changed.status_code == 200, changed.text

    assert credential_verify(secret=secret).limits.allowed_networks == (ip_network("192.0.2.0/24"),)
