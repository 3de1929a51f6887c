"""A key's own limits as stored and as the call reads them (keys/services.py `api_key_limits_clean`,
`api_key_limits_set`; the credential's `KeyLimits`). What each limit does to a call is tested with
the call's step (tests/billing, tests/api)."""

from __future__ import annotations

from decimal import Decimal
from ipaddress import ip_network

import pytest

from accounts.services import account_create, account_set_groups
from keys.authentication import credential_verify
from keys.errors import KeyLimitsInvalid
from keys.models import ApiKey
from keys.services import ApiKeyLimitsInput, api_key_create, api_key_limits_clean, api_key_limits_set
from tests.factories import alpha_group_make

pytestmark = pytest.mark.django_db(transaction=True)


def key_make(limits: ApiKeyLimitsInput | None = None) -> tuple[ApiKey, str]:
    group = alpha_group_make()
    account = account_create(username="limited")
    account_set_groups(account=account, allowed_groups=[group], current_group=group)
    return api_key_create(account=account, group=group, label="agent", limits=limits)


def test_a_key_is_created_with_its_limits_in_canonical_form() -> None:
    api_key, secret = key_make(
        ApiKeyLimitsInput(
            budget="5.00",
            budget_period="Monthly",
            model_ids=["beta", "alpha", "beta", " "],
            rpm=60,
            tpm=100_000,
            allowed_ips=["10.1.2.3/8", "2001:db8::1", "192.168.0.7"],
        )
    )

    api_key.refresh_from_db()
    assert api_key.budget == Decimal("5.00")
    assert api_key.budget_period == "monthly"
    assert api_key.model_ids == ["alpha", "beta"]
    assert (api_key.rpm, api_key.tpm) == (60, 100_000)
    assert api_key.allowed_ips == ["10.0.0.0/8", "192.168.0.7/32", "2001:db8::1/128"]
    limits = credential_verify(secret=secret).limits
    assert limits.budget == Decimal("5.00") and limits.budget_period == "monthly"
    assert limits.model_ids == frozenset({"alpha", "beta"})
    assert ip_network("10.0.0.0/8") in limits.allowed_networks


def test_a_key_without_limits_carries_none() -> None:
    _, secret = key_make()

    limits = credential_verify(secret=secret).limits
    assert limits.budget is None and limits.budget_period == ""
    assert limits.model_ids == frozenset() and limits.allowed_networks == ()
    assert limits.rpm is None and limits.tpm is None


@pytest.mark.parametrize(
    ("limits", "param"),
    [
        (ApiKeyLimitsInput(budget="-1", budget_period="daily"), "budget"),
        (ApiKeyLimitsInput(budget="abc", budget_period="daily"), "budget"),
        (ApiKeyLimitsInput(budget="NaN", budget_period="daily"), "budget"),
        (ApiKeyLimitsInput(budget="0.000000001", budget_period="daily"), "budget"),
        (ApiKeyLimitsInput(budget="1e20", budget_period="daily"), "budget"),
        (ApiKeyLimitsInput(budget="5"), "budget_period"),
        (ApiKeyLimitsInput(budget_period="weekly"), "budget"),
        (ApiKeyLimitsInput(budget="5", budget_period="hourly"), "budget_period"),
        (ApiKeyLimitsInput(rpm=0), "rpm"),
        (ApiKeyLimitsInput(tpm=-5), "tpm"),
        (ApiKeyLimitsInput(allowed_ips=["10.0.0.0/33"]), "allowed_ips"),
        (ApiKeyLimitsInput(allowed_ips=["example.com"]), "allowed_ips"),
        (ApiKeyLimitsInput(model_ids=[f"m{i}" for i in range(101)]), "models"),
    ],
)
def test_limits_that_cannot_be_stored_are_refused_naming_the_field(
    limits: ApiKeyLimitsInput, param: str
) -> None:
    with pytest.raises(KeyLimitsInvalid) as refused:
        api_key_limits_clean(limits=limits)
    assert refused.value.param == param


def test_a_refused_limit_creates_no_key() -> None:
    with pytest.raises(KeyLimitsInvalid):
        key_make(ApiKeyLimitsInput(rpm=0))
    assert not ApiKey.objects.exists()


def test_changed_limits_apply_from_the_next_authentication() -> None:
    api_key, secret = key_make()
    assert credential_verify(secret=secret).limits.rpm is None

    changed = api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput(rpm=5, model_ids=["alpha"]))

    assert changed == ["model_ids", "rpm"]
    limits = credential_verify(secret=secret).limits
    assert limits.rpm == 5 and limits.model_ids == frozenset({"alpha"})
    assert api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput(rpm=5, model_ids=["alpha"])) == []
