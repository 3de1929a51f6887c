"""A key's own limits in the console: set with the key on the keys page, changed on the key's limits
page (its own keys only), each refusal on its field; the keys page lists the limits with the spend of
the budget's current window beside them."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from billing.models import KeyBudgetUsage
from billing.windows import window_start_for
from keys.authentication import credential_verify
from keys.models import ApiKey
from keys.services import ApiKeyLimitsInput, api_key_create, api_key_revoke

pytestmark = pytest.mark.django_db

NO_LIMITS = {"budget": "", "budget_period": "", "models": "", "rpm": "", "tpm": "", "allowed_ips": ""}


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
            allowed_ips=["10.0.0.0/8"],
        ),
    )[0]


def test_a_key_is_created_with_its_limits(alice_client, alice, alpha_group, alpha_model):
    response = alice_client.post(
        "/console/keys/",
        {
            "label": "agent",
            "group": alpha_group.pk,
            "budget": "5.00",
            "budget_period": "monthly",
            "models": "alpha-image-2",
            "rpm": "60",
            "tpm": "100000",
            "allowed_ips": "10.0.0.0/8, 192.168.1.7",
        },
    )

    assert response.status_code == 302
    api_key = ApiKey.objects.get(account=alice)
    assert (api_key.budget, api_key.budget_period, api_key.model_ids) == (
        Decimal("5.00"),
        "monthly",
        ["alpha-image-2"],
    )
    assert (api_key.rpm, api_key.tpm, api_key.allowed_ips) == (60, 100_000, ["10.0.0.0/8", "192.168.1.7/32"])
    page = alice_client.get("/console/keys/").content.decode()
    assert "¥0.00 of ¥5.00 this month, resets" in page
    assert "60 requests a minute" in page and "100,000 tokens a minute" in page
    assert "Models: alpha-image-2" in page and "From: 10.0.0.0/8, 192.168.1.7/32" in page


def test_a_key_without_limits_is_listed_with_none(alice_client, alice_key):
    response = alice_client.get("/console/keys/")

    row = response.context["key_rows"][0]
    assert (row.api_key.pk, row.budget, row.limits) == (alice_key[0].pk, "", [])
    assert "No limits of its own" in response.content.decode()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"budget": "-1", "budget_period": "daily"}, "budget", "budget must be an amount of 0 or more"),
        ({"budget": "5"}, "budget_period", "A budget needs a budget_period"),
        ({"budget_period": "weekly"}, "budget", "A budget_period needs a budget"),
        ({"budget": "5", "budget_period": "hourly"}, "budget_period", "Select a valid choice"),
        ({"rpm": "0"}, "rpm", "rpm must be a whole number of at least 1"),
        ({"rpm": "2147483648"}, "rpm", "rpm must be at most 2147483647"),
        ({"tpm": "lots"}, "tpm", "Enter a whole number"),
        ({"allowed_ips": "10.0.0.0/33"}, "allowed_ips", "'10.0.0.0/33' is not an IP address"),
        ({"models": "alpha-image-2, gpt-x"}, "models", "gpt-x is not a model of the key's group"),
        ({"models": "beta-imagine-image"}, "models", "beta-imagine-image is not a model of the key's group"),
    ],
)
def test_a_bad_limit_at_creation_is_shown_on_its_field_and_no_key_is_made(
    alice_client, alice, alpha_group, alpha_model, beta_model, fields, field, message
):
    response = alice_client.post(
        "/console/keys/", {"label": "x", "group": alpha_group.pk, **NO_LIMITS, **fields}
    )

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == [field], errors
    assert errors[field][0].startswith(message), errors
    assert 'class="field has-error"' in response.content.decode()
    assert not ApiKey.objects.filter(account=alice).exists()


def test_the_limits_page_shows_the_keys_limits_in_its_form(alice_client, limited_key):
    response = alice_client.get(f"/console/keys/{limited_key.pk}/limits/")

    assert response.status_code == 200
    form = response.context["form"]
    assert (form["budget"].value(), form["budget_period"].value(), form["models"].value()) == (
        "5.00",
        "monthly",
        "alpha-image-2",
    )
    assert (form["rpm"].value(), form["tpm"].value(), form["allowed_ips"].value()) == (60, None, "10.0.0.0/8")
    assert "Models of Alpha-Image: alpha-image-2." in response.content.decode()


def test_the_limits_page_changes_and_unsets_limits(alice_client, limited_key):
    stored = ApiKey.objects.get(pk=limited_key.pk)

    response = alice_client.post(
        f"/console/keys/{limited_key.pk}/limits/",
        {**NO_LIMITS, "budget": "20", "budget_period": "weekly", "tpm": "5000"},
        follow=True,
    )

    assert response.redirect_chain == [("/console/keys/", 302)]
    assert "were saved; they apply from its next call" in response.content.decode()
    stored.refresh_from_db()
    assert (stored.budget, stored.budget_period, stored.model_ids) == (
        Decimal("20"),
        "weekly",
        [],
    )
    assert (stored.rpm, stored.tpm, stored.allowed_ips) == (None, 5000, [])
    assert "¥0.00 of ¥20.00 this week, resets" in response.content.decode()


# The credential cache is invalidated once the change commits.
@pytest.mark.django_db(transaction=True)
def test_a_change_applies_from_the_keys_next_authentication(alice_client, alice, alpha_group):
    api_key, secret = api_key_create(account=alice, group=alpha_group)
    assert credential_verify(secret=secret).limits.rpm is None

    alice_client.post(f"/console/keys/{api_key.pk}/limits/", {**NO_LIMITS, "rpm": "7"})

    assert credential_verify(secret=secret).limits.rpm == 7


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"models": "beta-imagine-image"}, "models"),
        ({"budget": "1.123456789", "budget_period": "daily"}, "budget"),
        ({"allowed_ips": "everywhere"}, "allowed_ips"),
    ],
)
def test_a_bad_change_is_shown_on_its_field_and_changes_nothing(
    alice_client, limited_key, beta_model, fields, field
):
    response = alice_client.post(f"/console/keys/{limited_key.pk}/limits/", {**NO_LIMITS, **fields})

    assert response.status_code == 400
    assert list(response.context["form"].errors) == [field]
    limited_key.refresh_from_db()
    assert (limited_key.budget, limited_key.rpm, limited_key.model_ids) == (
        Decimal("5"),
        60,
        ["alpha-image-2"],
    )


def test_the_keys_page_shows_the_spend_of_the_current_window(alice_client, limited_key, settings):
    settings.GATEWAY_TIMEZONE = "UTC"
    now = datetime.now(tz=UTC)
    KeyBudgetUsage.objects.create(
        api_key=limited_key,
        window="month",
        window_start=window_start_for(window="month", moment=now),
        used=Decimal("1.20"),
    )
    KeyBudgetUsage.objects.create(  # last month's: not this window
        api_key=limited_key,
        window="month",
        window_start=datetime(2001, 1, 1, tzinfo=UTC).date(),
        used=Decimal("4"),
    )
    first_of_next = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)

    keys_page = alice_client.get("/console/keys/").content.decode()
    limits_page = alice_client.get(f"/console/keys/{limited_key.pk}/limits/").content.decode()

    shown = f"¥1.20 of ¥5.00 this month, resets 1 {first_of_next:%b}"
    assert shown in keys_page and shown in limits_page


def test_another_accounts_key_has_no_limits_page(bob_client, limited_key):
    assert bob_client.get(f"/console/keys/{limited_key.pk}/limits/").status_code == 404
    assert bob_client.post(f"/console/keys/{limited_key.pk}/limits/", {**NO_LIMITS}).status_code == 404
    limited_key.refresh_from_db()
    assert limited_key.rpm == 60 and limited_key.budget == Decimal("5")


def test_a_revoked_keys_limits_are_not_changed(alice_client, limited_key):
    api_key_revoke(api_key=limited_key)

    page = alice_client.get(f"/console/keys/{limited_key.pk}/limits/")
    posted = alice_client.post(f"/console/keys/{limited_key.pk}/limits/", {**NO_LIMITS})

    assert page.status_code == 200 and page.context["form"] is None
    assert posted.status_code == 409
    limited_key.refresh_from_db()
    assert limited_key.rpm == 60


def test_the_limits_form_needs_the_csrf_token(alice, limited_key):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)

    response = client.post(f"/console/keys/{limited_key.pk}/limits/", {**NO_LIMITS})

    assert response.status_code == 403
    limited_key.refresh_from_db()
    assert limited_key.rpm == 60
