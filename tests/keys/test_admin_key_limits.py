"""A key's own limits in the Django admin: set when the key is added, changed on its page, each
refusal of keys.services (`api_key_limits_clean`, `api_key_models_check`) on its field; the key's
spend in its current budget window shown read-only; a group's tpm in the group list."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import KeyBudgetUsage
from billing.windows import PERIOD_WINDOWS, window_start_for
from keys.models import ApiKey
from keys.services import ApiKeyLimitsInput, api_key_create

pytestmark = pytest.mark.django_db

ADD = "admin:keys_apikey_add"


def _fields(**overrides: str) -> dict[str, str]:
    return {
        "label": "agent",
        "budget": "",
        "budget_period": "",
        "models": "",
        "rpm": "",
        "tpm": "",
        "allowed_ips": "",
        **overrides,
    }


def test_a_key_added_in_the_admin_gets_its_limits(staff_client, alice, alpha_group, alpha_model):
    response = staff_client.post(
        reverse(ADD),
        {
            "account": alice.pk,
            "group": alpha_group.pk,
            **_fields(
                budget="5.00",
                budget_period="monthly",
                models="alpha-image-2",
                rpm="60",
                tpm="100000",
                allowed_ips="10.1.0.0/16\n192.168.0.7, 2001:db8::/32",
            ),
        },
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    api_key = ApiKey.objects.get(account=alice)
    assert (api_key.budget, api_key.budget_period, api_key.model_ids) == (
        Decimal("5.00"),
        "monthly",
        ["alpha-image-2"],
    )
    assert (api_key.rpm, api_key.tpm) == (60, 100_000)
    assert api_key.allowed_ips == ["10.1.0.0/16", "192.168.0.7/32", "2001:db8::/32"]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"budget": "-1", "budget_period": "daily"}, "budget", "budget must be an amount of 0 or more"),
        ({"budget": "5"}, "budget_period", "A budget needs a budget_period"),
        ({"budget_period": "weekly"}, "budget", "A budget_period needs a budget"),
        ({"rpm": "0"}, "rpm", "rpm must be a whole number of at least 1"),
        ({"tpm": "0"}, "tpm", "tpm must be a whole number of at least 1"),
        ({"allowed_ips": "10.0.0.0/8\nintranet"}, "allowed_ips", "'intranet' is not an IP address"),
        (
            {"models": "alpha-image-2, no-such-model"},
            "models",
            "no-such-model is not a model of the key's group",
        ),
        ({"models": "beta-imagine-image"}, "models", "beta-imagine-image is not a model of the key's group"),
    ],
)
def test_the_admin_refuses_a_bad_limit_on_its_field(
    staff_client, alice, alpha_group, alpha_model, beta_model, fields, field, message
):
    response = staff_client.post(
        reverse(ADD), {"account": alice.pk, "group": alpha_group.pk, **_fields(**fields)}
    )

    assert response.status_code == 200  # the form again, with the error
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field], errors
    assert errors[field][0].startswith(message), errors
    assert not ApiKey.objects.exists()


def test_the_change_page_shows_and_changes_the_limits(staff_client, alice, alpha_group, alpha_model):
    api_key, _ = api_key_create(
        account=alice,
        group=alpha_group,
        label="agent",
        limits=ApiKeyLimitsInput(
            budget="5.00", budget_period="monthly", model_ids=["alpha-image-2"], allowed_ips=["10.0.0.0/8"]
        ),
    )
    url = reverse("admin:keys_apikey_change", args=[api_key.pk])
    page = staff_client.get(url)
    form = page.context["adminform"].form
    assert form.initial["models"] == "alpha-image-2" and form.initial["allowed_ips"] == "10.0.0.0/8"
    assert form.initial["budget"] == Decimal("5.00") and form.initial["budget_period"] == "monthly"

    response = staff_client.post(
        url, _fields(budget="", budget_period="", models="", rpm="30", allowed_ips="192.0.2.0/24")
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    api_key.refresh_from_db()
    assert (api_key.budget, api_key.budget_period, api_key.model_ids) == (None, "", [])
    assert (api_key.rpm, api_key.tpm, api_key.allowed_ips) == (30, None, ["192.0.2.0/24"])
    assert (api_key.account_id, api_key.group_id, api_key.label) == (alice.pk, alpha_group.pk, "agent")


def test_a_change_checks_the_models_against_the_keys_own_group(
    staff_client, alice, alpha_group, alpha_model, beta_model
):
    api_key, _ = api_key_create(account=alice, group=alpha_group)
    url = reverse("admin:keys_apikey_change", args=[api_key.pk])

    response = staff_client.post(url, _fields(models="beta-imagine-image"))

    assert response.status_code == 200
    assert "beta-imagine-image is not a model" in response.context["adminform"].form.errors["models"][0]
    api_key.refresh_from_db()
    assert api_key.model_ids == []


def test_the_change_page_shows_the_spend_in_the_current_window(staff_client, alice, alpha_group, settings):
    settings.GATEWAY_TIMEZONE = "UTC"
    api_key, _ = api_key_create(
        account=alice, group=alpha_group, limits=ApiKeyLimitsInput(budget="5.00", budget_period="monthly")
    )
    now = timezone.now()
    KeyBudgetUsage.objects.create(
        api_key=api_key,
        window=PERIOD_WINDOWS["monthly"],
        window_start=window_start_for(window="month", moment=now),
        used=Decimal("1.20"),
    )
    first_of_next = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)

    page = staff_client.get(reverse("admin:keys_apikey_change", args=[api_key.pk]))

    assert f"¥1.20 of ¥5.00 this month, resets 1 {first_of_next:%b}" in page.content.decode()


def test_a_key_without_a_budget_says_so(staff_client, alice, alpha_group):
    api_key, _ = api_key_create(account=alice, group=alpha_group)

    page = staff_client.get(reverse("admin:keys_apikey_change", args=[api_key.pk]))

    assert "No budget." in page.content.decode()


def test_the_group_list_shows_tpm(staff_client, alpha_group):
    alpha_group.tpm = 123_456
    alpha_group.save(update_fields=["tpm"])

    page = staff_client.get(reverse("admin:groups_group_changelist"))

    assert "123456" in page.content.decode() or "123,456" in page.content.decode()
