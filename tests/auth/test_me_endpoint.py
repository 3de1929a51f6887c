"""GET /v1/me: each part behind its scope, every scope combination, and a manual key seeing all."""

from __future__ import annotations

from itertools import combinations

import pytest

from tests.auth.conftest import assert_compatible_error, bearer

pytestmark = pytest.mark.django_db

SCOPES = ("profile:read", "account:read", "account:balance:read")
PARTS = {
    "profile:read": {"user"},
    "account:read": {"account", "current_group", "allowed_groups"},
    "account:balance:read": {"currency", "balance", "balance_held", "balance_available"},
}
SCOPE_SETS = [frozenset(c) for n in range(1, 4) for c in combinations(SCOPES, n)]


@pytest.mark.parametrize("scopes", SCOPE_SETS, ids=lambda s: "+".join(sorted(s)))
def test_it_shows_exactly_the_parts_the_scopes_allow(client, alice, token_for, scopes):
    response = client.get("/v1/me", headers=bearer(token_for(alice, scopes)))

    assert response.status_code == 200, response.content
    body = response.json()
    expected = {"object", "credential"}.union(*(PARTS[scope] for scope in scopes))
    assert set(body) == expected
    assert body["credential"] == {"type": "oauth", "label": "", "scopes": sorted(scopes)}


def test_it_refuses_a_token_with_none_of_the_scopes(client, alice, token_for):
    response = client.get("/v1/me", headers=bearer(token_for(alice, [])))

    assert_compatible_error(response, status=403, type_="permission_error", code="insufficient_scope")


def test_it_shows_a_manual_key_its_own_account_in_full(client, alice, alpha_group, key_for):
    response = client.get("/v1/me", headers=bearer(key_for(alice, alpha_group, label="laptop")))

    assert response.status_code == 200
    body = response.json()
    group = {
        "id": 1,
        "name": "Alpha-Image",
        "status": "active",
        "billing": "balance",
        "image_enabled": True,
        "allow_group_override": True,
    }
    assert body["credential"] == {
        "type": "api_key",
        "label": "laptop",
        "group": {"id": 1, "name": "Alpha-Image"},
    }
    assert body["user"]["username"] == "alice"
    assert body["user"]["email"] == "alice@example.com"
    assert body["account"]["id"] == alice.pk
    assert body["current_group"] == group
    assert body["allowed_groups"] == [group]
    # Amounts are strings with the fixed places, never numbers.
    assert body["currency"] == "CNY"
    assert body["balance"] == "10.00000000"
    assert body["balance_held"] == "0.00000000"
    assert body["balance_available"] == "10.00000000"


def test_it_shows_another_account_only_its_own_data(client, alice, bob, alpha_group, key_for):
    response = client.get("/v1/me", headers=bearer(key_for(bob, alpha_group)))

    body = response.json()
    assert body["user"]["username"] == "bob"
    assert body["account"]["id"] == bob.pk
    assert body["balance"] == "0.00000000"
