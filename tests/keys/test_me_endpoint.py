"""GET /v1/me: each part behind its scope, every scope combination, and a manual key seeing all."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from itertools import combinations
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.holds import hold_capture, hold_reserve
from billing.key_budgets import KeyBudget
from billing.selectors import usage_totals_get
from billing.usage import TokenCounts, usage_record_build, usage_record_insert
from keys.services import ApiKeyLimitsInput, api_key_create
from tests.keys.conftest import assert_compatible_error, bearer

pytestmark = pytest.mark.django_db

NO_USAGE = {
    "calls": 0,
    "amount": "0.00000000",
    "input_tokens": 0,
    "cached_tokens": 0,
    "cache_write_tokens": 0,
    "output_tokens": 0,
}

NO_LIMITS = {
    "budget": None,
    "budget_period": None,
    "models": [],
    "rpm": None,
    "tpm": None,
    "allowed_ips": [],
}

SCOPES = ("profile:read", "account:read", "account:balance:read")
PARTS = {
    "profile:read": {"user"},
    "account:read": {"account", "current_group", "allowed_groups"},
    "account:balance:read": {"currency", "balance", "balance_held", "balance_available", "usage"},
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
        "limits": NO_LIMITS,
        "budget_window": None,
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
    assert body["usage"] == {"today": NO_USAGE, "this_month": NO_USAGE}


def test_it_shows_another_account_only_its_own_data(client, alice, bob, alpha_group, key_for):
    response = client.get("/v1/me", headers=bearer(key_for(bob, alpha_group)))

    body = response.json()
    assert body["user"]["username"] == "bob"
    assert body["account"]["id"] == bob.pk
    assert body["balance"] == "0.00000000"


def _record(
    account,
    request_id: str,
    *,
    at: datetime | None = None,
    amount: str = "0",
    status: int = 200,
    tokens: TokenCounts | None = None,
    endpoint: str = "chat.completions",
) -> None:
    usage_record_insert(
        record=usage_record_build(
            request_id=request_id,
            account_id=account.pk,
            credential=f"api_key:{account.pk}",
            group_id=None,
            model_id="alpha-chat",
            endpoint=endpoint,
            billing="balance",
            status=status,
            error_code="" if status == 200 else "upstream_error",
            amount=Decimal(amount),
            upstream="demo",
            latency_ms=5,
            tokens=tokens,
            created_at=at,
        )
    )


def test_it_sums_todays_and_this_months_calls_cost_and_tokens(client, alice, bob, alpha_group, key_for):
    _record(alice, "req_text", amount="0.000024", tokens=TokenCounts(input=1234, cached=200, output=56))
    _record(alice, "req_cached", amount="0.00001", tokens=TokenCounts(input=10, cache_write=300, output=4))
    _record(alice, "req_image", amount="0.15", endpoint="images.generations")
    _record(alice, "req_failed", status=502, tokens=TokenCounts())
    _record(bob, "req_bob", amount="9", tokens=TokenCounts(input=999, output=999))

    response = client.get("/v1/me", headers=bearer(key_for(alice, alpha_group)))

    assert response.status_code == 200
    today = {
        "calls": 3,
        "amount": "0.15003400",
        "input_tokens": 1244,
        "cached_tokens": 200,
        "cache_write_tokens": 300,
        "output_tokens": 60,
    }
    assert response.json()["usage"] == {"today": today, "this_month": today}


def test_it_counts_days_and_months_in_the_gateway_timezone(alice, settings):
    settings.GATEWAY_TIMEZONE = "Asia/Shanghai"  # UTC+8
    now = datetime(2025, 3, 10, 2, 0, tzinfo=UTC)  # 10:00 on March 10 in Shanghai
    _record(alice, "req_today", at=datetime(2025, 3, 9, 16, 30, tzinfo=UTC), amount="0.000024")
    _record(alice, "req_yesterday", at=datetime(2025, 3, 9, 15, 59, tzinfo=UTC), amount="0.0001")
    _record(alice, "req_month_start", at=datetime(2025, 2, 28, 16, 0, tzinfo=UTC), amount="1")
    _record(alice, "req_last_month", at=datetime(2025, 2, 28, 15, 59, tzinfo=UTC), amount="5")

    periods = usage_totals_get(account_id=alice.pk, now=now)

    assert (periods.today.calls, periods.today.amount) == (1, Decimal("0.000024"))
    assert (periods.this_month.calls, periods.this_month.amount) == (3, Decimal("1.000124"))


def test_it_reads_both_periods_with_one_query(alice):
    _record(alice, "req_text", amount="0.000024", tokens=TokenCounts(input=12))

    with CaptureQueriesContext(connection) as queries:
        usage_totals_get(account_id=alice.pk)

    assert len(queries) == 1


def test_it_hides_usage_from_a_token_without_the_balance_scope(client, alice, token_for):
    _record(alice, "req_text", amount="0.000024", tokens=TokenCounts(input=12))

    response = client.get("/v1/me", headers=bearer(token_for(alice, ["profile:read", "account:read"])))

    assert response.status_code == 200
    assert "usage" not in response.json()


def test_it_shows_a_key_its_own_limits_and_the_spend_of_its_budget_window(
    client, alice, alpha_group, settings
):
    api_key, secret = api_key_create(
        account=alice,
        group=alpha_group,
        limits=ApiKeyLimitsInput(
            budget="5.00",
            budget_period="monthly",
            model_ids=["alpha-image-2"],
            rpm=60,
            tpm=100_000,
            allowed_ips=["10.0.0.0/8", "2001:db8::1"],
        ),
    )
    key_budget = KeyBudget(api_key_id=api_key.pk, budget=Decimal("5.00"), period="monthly")
    captured = hold_reserve(
        account_id=alice.pk, amount=Decimal("0.15"), reference="r1", key_budget=key_budget
    )
    hold_capture(hold=captured)
    hold_reserve(
        account_id=alice.pk, amount=Decimal("0.05"), reference="r2", key_budget=key_budget
    )  # in flight

    # From inside the key's allowed networks (from anywhere else the key is refused).
    response = client.get("/v1/me", headers=bearer(secret), REMOTE_ADDR="10.1.2.3")

    assert response.status_code == 200
    credential = response.json()["credential"]
    assert credential["limits"] == {
        "budget": "5.00000000",
        "budget_period": "monthly",
        "models": ["alpha-image-2"],
        "rpm": 60,
        "tpm": 100000,
        "allowed_ips": ["10.0.0.0/8", "2001:db8::1/128"],
    }
    zone = ZoneInfo(settings.GATEWAY_TIMEZONE)
    month = timezone.now().astimezone(zone).date().replace(day=1)
    next_month = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
    assert credential["budget_window"] == {
        "start": datetime.combine(month, time.min, tzinfo=zone).isoformat(),
        "end": datetime.combine(next_month, time.min, tzinfo=zone).isoformat(),
        "used": "0.20000000",
        "remaining": "4.80000000",
    }


def test_a_total_budgets_window_never_ends(client, alice, alpha_group, settings):
    settings.GATEWAY_TIMEZONE = "Asia/Shanghai"
    _, secret = api_key_create(
        account=alice, group=alpha_group, limits=ApiKeyLimitsInput(budget="1", budget_period="total")
    )

    credential = client.get("/v1/me", headers=bearer(secret)).json()["credential"]

    assert credential["limits"]["budget"] == "1.00000000"
    assert credential["budget_window"] == {
        "start": "1970-01-01T00:00:00+08:00",
        "end": None,
        "used": "0.00000000",
        "remaining": "1.00000000",
    }
