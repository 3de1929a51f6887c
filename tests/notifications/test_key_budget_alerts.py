"""A key's budget window reaching a percentage writes its event with the charge, once per window;
a new window in GATEWAY_TIMEZONE re-arms it. Both databases; the concurrent case on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.ledger import wallet_top_up
from billing.models import KeyBudgetUsage
from keys.authentication import credential_verify
from keys.services import ApiKeyLimitsInput, api_key_create
from notifications.models import Notification
from tests.billing.conftest import FakeUpstream, alpha_call, postgres_only, run_concurrently
from tests.notifications.conftest import alerts_set
from upstreams.providers.base import UpstreamError

pytestmark = [pytest.mark.django_db(transaction=True)]

WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


def budget_key(account, group, *, budget: str, period: str):
    api_key, secret = api_key_create(
        account=account, group=group, limits=ApiKeyLimitsInput(budget=budget, budget_period=period)
    )
    return api_key, credential_verify(secret=secret)


def key_events(api_key):
    return list(Notification.objects.filter(subject=f"key:{api_key.pk}").order_by("threshold", "window"))


def test_a_key_budget_emits_each_percentage_once_per_window(alice, alpha_group, alpha_model):
    api_key, credential = budget_key(alice, alpha_group, budget="0.75", period="monthly")  # 5 calls at 0.15
    for index in range(3):  # 0.45: 60 %
        alpha_call(credential, alpha_group, FakeUpstream(), request_id=f"k{index}", now=WEDNESDAY_NOON)
    assert key_events(api_key) == []

    alpha_call(credential, alpha_group, FakeUpstream(), request_id="k3", now=WEDNESDAY_NOON)  # 0.60: 80 %
    [eighty] = key_events(api_key)
    assert (eighty.account_id, eighty.kind, eighty.threshold, eighty.window) == (
        alice.pk,
        "key.budget_threshold",
        Decimal("80"),
        "2025-01-01",
    )
    assert eighty.payload == {
        "api_key": api_key.pk,
        "budget_period": "monthly",
        "budget": "0.75000000",
        "used": "0.60000000",
        "window_start": "2025-01-01",
        "window_ends_at": "2025-02-01T00:00:00+00:00",
        "percentage": 80,
    }
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="k4", now=WEDNESDAY_NOON)  # 0.75: 100 %
    assert [(e.threshold, e.payload["used"]) for e in key_events(api_key)] == [
        (Decimal("80"), "0.60000000"),
        (Decimal("100"), "0.75000000"),
    ]
    assert KeyBudgetUsage.objects.get().used == Decimal("0.75")


def test_a_new_day_rearms_a_daily_key_budget(alice, alpha_group, alpha_model, settings):
    settings.GATEWAY_TIMEZONE = "Asia/Shanghai"
    api_key, credential = budget_key(alice, alpha_group, budget="0.30", period="daily")
    midnight = datetime(2025, 1, 15, 16, 0, tzinfo=UTC)  # 00:00 on the 16th in Shanghai
    for index, moment in enumerate(
        [midnight - timedelta(minutes=1)] * 2 + [midnight + timedelta(minutes=1)] * 2
    ):
        alpha_call(credential, alpha_group, FakeUpstream(), request_id=f"d{index}", now=moment)
    assert [(e.window, e.threshold) for e in key_events(api_key)] == [
        ("2025-01-15", Decimal("80")),
        ("2025-01-16", Decimal("80")),
        ("2025-01-15", Decimal("100")),
        ("2025-01-16", Decimal("100")),
    ]


def test_a_failed_call_on_a_key_writes_no_event(alice, alpha_group, alpha_model):
    api_key, credential = budget_key(alice, alpha_group, budget="0.15", period="total")
    with pytest.raises(UpstreamError):
        alpha_call(credential, alpha_group, FakeUpstream(fail=True), now=WEDNESDAY_NOON)
    assert key_events(api_key) == []
    alpha_call(credential, alpha_group, FakeUpstream(), now=WEDNESDAY_NOON)
    assert [e.threshold for e in key_events(api_key)] == [Decimal("80"), Decimal("100")]
    assert {e.window for e in key_events(api_key)} == {"1970-01-01"}


def test_the_account_percentages_apply_to_its_keys(alice, alpha_group, alpha_model):
    alerts_set(alice, percentages=[50])
    api_key, credential = budget_key(alice, alpha_group, budget="0.60", period="weekly")
    for index in range(2):  # 0.30: 50 %
        alpha_call(credential, alpha_group, FakeUpstream(), request_id=f"w{index}", now=WEDNESDAY_NOON)
    [event] = key_events(api_key)
    assert (event.threshold, event.window, event.payload["budget_period"]) == (
        Decimal("50"),
        "2025-01-13",
        "weekly",
    )


@pytest.mark.postgres
@postgres_only
def test_concurrent_calls_reaching_a_key_budget_write_one_event_per_percentage(bob, alpha_group, alpha_model):
    wallet_top_up(account=bob, amount="10", reference="test")
    api_key, credential = budget_key(bob, alpha_group, budget="1.50", period="daily")  # room for 10
    outcomes = run_concurrently(
        lambda i: alpha_call(credential, alpha_group, FakeUpstream(), request_id=f"c{i}", now=WEDNESDAY_NOON),
        20,
    )
    served = [value for status, value in outcomes if status == "ok"]
    assert len(served) == 10
    assert [(e.threshold, e.window) for e in key_events(api_key)] == [
        (Decimal("80"), "2025-01-15"),
        (Decimal("100"), "2025-01-15"),
    ]
