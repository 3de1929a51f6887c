"""A manual key serves only while its group is among its account's allowed groups: creating one for
another group is refused, and a key whose group is taken from the account stops at its next call."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management.base import CommandError

from accounts.services import account_set_groups
from billing.models import Wallet
from keys.models import ApiKey
from keys.services import ApiKeyGroupNotAllowed, api_key_create
from tests.keys.conftest import assert_compatible_error, bearer
from tests.keys.test_oauth import run

pytestmark = pytest.mark.django_db


def generate(client, secret: str, model: str):
    return client.post(
        "/v1/images/generations",
        data={"model": model, "prompt": "a fox", "size": "1024x1024"},
        content_type="application/json",
        headers=bearer(secret),
    )


def test_it_refuses_to_create_a_key_for_a_group_the_account_may_not_use(alice, beta_group):
    with pytest.raises(ApiKeyGroupNotAllowed, match="Beta-API"):
        api_key_create(account=alice, group=beta_group)

    assert not ApiKey.objects.exists()


def test_createapikey_refuses_a_group_the_account_may_not_use(alice, alpha_group, beta_group):
    with pytest.raises(CommandError, match="not among the groups alice may use"):
        run("createapikey", "alice", "--group", "Beta-API")

    assert not ApiKey.objects.exists()
    run("createapikey", "alice", "--group", "Alpha-Image")
    assert ApiKey.objects.get().group_id == alpha_group.pk


# Transactional: the changes commit, so their invalidation of the credential cache runs (with Redis)
# as in production.
@pytest.mark.django_db(transaction=True)
def test_a_key_stops_at_once_when_its_group_is_taken_from_the_account(
    client, alice, alpha_group, gamma_group, alpha_model, gamma_model, key_for
):
    account_set_groups(account=alice, allowed_groups=[alpha_group, gamma_group], current_group=alpha_group)
    secret = key_for(alice, gamma_group)
    assert generate(client, secret, "gamma-image-1").status_code == 200  # and its credential is cached

    account_set_groups(account=alice, allowed_groups=[alpha_group], current_group=alpha_group)

    response = generate(client, secret, "gamma-image-1")
    assert_compatible_error(response, status=403, type_="permission_error", code="GROUP_NOT_ALLOWED")
    models = client.get("/v1/models", headers=bearer(secret))
    assert_compatible_error(models, status=403, type_="permission_error", code="GROUP_NOT_ALLOWED")
    assert Wallet.objects.get(account=alice).balance == Decimal("10") - gamma_model.price


@pytest.mark.django_db(transaction=True)
def test_a_key_serves_again_once_its_group_is_given_back(
    client, alice, alpha_group, gamma_group, gamma_model, key_for
):
    account_set_groups(account=alice, allowed_groups=[alpha_group, gamma_group], current_group=alpha_group)
    secret = key_for(alice, gamma_group)
    alice.allowed_groups.remove(gamma_group)
    assert generate(client, secret, "gamma-image-1").status_code == 403

    alice.allowed_groups.add(gamma_group)

    assert generate(client, secret, "gamma-image-1").status_code == 200
