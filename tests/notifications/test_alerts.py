"""Crossing a line writes its event into the outbox with the charge: once per crossing or window,
never for a failed call, a top-up or an adjustment. The same cases run on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from billing.ledger import wallet_adjust, wallet_top_up
from billing.models import LedgerEntry, Wallet
from core.config_cache import config_cache_enabled
from notifications.models import Notification
from notifications.services import AlertSettingsInput, alert_settings_set
from tests.billing.conftest import (
    BETA_PRICE,
    FakeUpstream,
    alpha_call,
    beta_call,
    credential_for,
    subscribe,
)
from tests.billing.test_round_trips import statements_sent
from tests.notifications.conftest import alerts_set
from upstreams.providers.base import UpstreamError

# Autocommit, as requests run: the capture's own transaction is what is tested.
pytestmark = [pytest.mark.django_db(transaction=True)]

ON_POSTGRES = connection.vendor == "postgresql"
WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


def events(**filters):
    return list(Notification.objects.filter(**filters).order_by("pk"))


def test_a_charge_that_takes_the_balance_below_the_floor_writes_one_event(alice, alpha_group, alpha_model):
    alerts_set(alice, floor="9.80")
    credential = credential_for(alice)
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r1")  # 9.85: above the floor
    assert events() == []

    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r2")  # 9.70: below it
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r3")  # still below: no second event

    [event] = events()
    assert (event.account_id, event.kind, event.subject, event.threshold) == (
        alice.pk,
        "balance.below_floor",
        "balance",
        Decimal("9.80"),
    )
    assert event.payload == {"floor": "9.80000000", "available_balance": "9.70000000"}
    assert (event.status, event.attempts, event.delivered_at) == ("pending", 0, None)
    assert event.event_id.startswith("evt_") and event.next_attempt_at == event.created_at
    assert Wallet.objects.get(account=alice).balance == Decimal("9.55")


def test_a_failed_call_at_the_floor_writes_no_event_and_charges_nothing(alice, alpha_group, alpha_model):
    alerts_set(alice, floor="9.90")
    credential = credential_for(alice)
    with pytest.raises(UpstreamError):
        alpha_call(credential, alpha_group, FakeUpstream(fail=True))
    assert events() == []
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("10"), Decimal("0"))


def test_the_event_is_written_in_the_transaction_of_the_charge(alice, alpha_group, alpha_model):
    alerts_set(alice, floor="9.90")
    credential = credential_for(alice)
    with statements_sent() as sent:
        alpha_call(credential, alpha_group, FakeUpstream())
    [event] = events()
    charge = LedgerEntry.objects.get(kind="charge")
    assert charge.balance_after == Decimal("9.85") and event.payload["available_balance"] == "9.85000000"
    if ON_POSTGRES:
        capture = next(i for i, s in enumerate(sent) if "billing_ledgerentry" in s.sql)
        insert = next(i for i, s in enumerate(sent) if 'INSERT INTO "notifications_notification"' in s.sql)
        assert capture < insert
        # Both inside the one transaction (BEGIN before the capture, COMMIT after the insert).
        assert all(s.in_transaction for s in sent[capture : insert + 1])


def test_a_capture_that_cannot_cross_costs_one_read_and_stays_one_statement(alice, alpha_group, alpha_model):
    alerts_set(alice, floor="1.00")
    credential = credential_for(alice)
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="warm")  # the settings are cached
    with statements_sent() as sent:
        alpha_call(credential, alpha_group, FakeUpstream())
    if ON_POSTGRES:
        if not config_cache_enabled():  # the thresholds are a query too without the shared cache
            assert "notifications_alertsettings" in sent.pop(1).sql
        # Reserve, the one read of the counters, the capture: each in autocommit.
        assert [s.in_transaction for s in sent] == [False, False, False]
        assert "billing_wallet" in sent[1].sql and sent[1].sql.lstrip().startswith("SELECT")
    assert events() == []


def test_an_account_without_a_floor_pays_nothing_for_alerts_on_a_wallet_call(alice, alpha_group, alpha_model):
    credential = credential_for(alice)
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="warm")
    with statements_sent() as sent:
        alpha_call(credential, alpha_group, FakeUpstream())
    if ON_POSTGRES:
        if not config_cache_enabled():  # the thresholds are a query too without the shared cache
            assert "notifications_alertsettings" in sent.pop(1).sql
        assert [s.in_transaction for s in sent] == [False, False]  # reserve, capture: as without alerts
    assert events() == []


def test_a_top_up_above_the_floor_rearms_it_and_never_emits(alice, alpha_group, alpha_model, staff):
    alerts_set(alice, floor="9.90")
    credential = credential_for(alice)
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r1")  # 9.85: crosses
    wallet_top_up(account=alice, amount="0.01", reference="t1")  # 9.86: still below, not re-armed
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r2")  # 9.71
    assert len(events()) == 1

    wallet_top_up(account=alice, amount="1.00", reference="t2")  # 10.71: above, re-armed; no event
    wallet_adjust(account=alice, amount="-0.70", note="refund reversed", created_by=staff)  # 10.01
    assert len(events()) == 1
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r3")  # 9.86: crosses again

    first, second = events()
    assert first.window != second.window
    assert second.payload["available_balance"] == "9.86000000"


def test_an_adjustment_below_the_floor_emits_nothing(alice, staff):
    alerts_set(alice, floor="5.00")
    wallet_adjust(account=alice, amount="-6.00", note="chargeback", created_by=staff)
    assert Wallet.objects.get(account=alice).balance == Decimal("4")
    assert events() == []


def test_a_subscription_cap_emits_each_percentage_once_per_window(carol, beta_group, beta_model):
    subscribe(carol, beta_group, daily="0.10")  # 5 calls at 0.02
    credential = credential_for(carol)
    for index in range(4):  # 0.08: 80 %
        beta_call(credential, beta_group, FakeUpstream(), request_id=f"a{index}", now=WEDNESDAY_NOON)
    [eighty] = events()
    assert (eighty.kind, eighty.threshold, eighty.window) == (
        "subscription.cap_threshold",
        Decimal("80"),
        "2025-01-15",
    )
    assert eighty.subject.endswith(":day")
    assert eighty.payload == {
        "subscription": eighty.payload["subscription"],
        "period": "daily",
        "cap": "0.10000000",
        "used": "0.08000000",
        "window_start": "2025-01-15",
        "window_ends_at": "2025-01-16T00:00:00+00:00",
        "percentage": 80,
    }
    beta_call(credential, beta_group, FakeUpstream(), request_id="a4", now=WEDNESDAY_NOON)  # 0.10: 100 %
    assert [(e.threshold, e.payload["used"]) for e in events()] == [
        (Decimal("80"), "0.08000000"),
        (Decimal("100"), "0.10000000"),
    ]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
def test_a_new_day_in_the_gateway_timezone_rearms_a_daily_cap(carol, beta_group, beta_model, settings, zone):
    settings.GATEWAY_TIMEZONE = zone
    subscribe(carol, beta_group, daily="0.04")
    credential = credential_for(carol)
    midnight = datetime(2025, 1, 16, tzinfo=UTC).astimezone(UTC)
    if zone == "Asia/Shanghai":
        midnight = datetime(2025, 1, 15, 16, 0, tzinfo=UTC)  # 00:00 on the 16th in Shanghai
    before, after = midnight - timedelta(minutes=1), midnight + timedelta(minutes=1)
    for index in range(2):
        beta_call(credential, beta_group, FakeUpstream(), request_id=f"d1-{index}", now=before)
    for index in range(2):
        beta_call(credential, beta_group, FakeUpstream(), request_id=f"d2-{index}", now=after)
    windows = sorted((e.window, e.threshold) for e in events(subject__endswith=":day"))
    assert windows == [
        ("2025-01-15", Decimal("80")),
        ("2025-01-15", Decimal("100")),
        ("2025-01-16", Decimal("80")),
        ("2025-01-16", Decimal("100")),
    ]


def test_the_account_percentages_replace_the_defaults(carol, beta_group, beta_model):
    alerts_set(carol, percentages=[50])
    subscribe(carol, beta_group, total="0.08")
    credential = credential_for(carol)
    for index in range(4):
        beta_call(credential, beta_group, FakeUpstream(), request_id=f"t{index}", now=WEDNESDAY_NOON)
    [event] = events()
    assert (event.threshold, event.window, event.payload["used"]) == (
        Decimal("50"),
        "1970-01-01",
        "0.04000000",
    )
    assert event.payload["period"] == "total" and event.payload["window_ends_at"] is None


def test_a_failed_subscription_call_writes_no_event(carol, beta_group, beta_model):
    subscribe(carol, beta_group, daily=str(BETA_PRICE))
    with pytest.raises(UpstreamError):
        beta_call(credential_for(carol), beta_group, FakeUpstream(fail=True), now=WEDNESDAY_NOON)
    assert events() == []


def test_new_settings_apply_from_the_next_call(alice, alpha_group, alpha_model):
    credential = credential_for(alice)
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r1")  # 9.85; "no floor" is cached
    alert_settings_set(
        account=alice,
        values=AlertSettingsInput(
            balance_floor="9.80", percentages=[80, 100], webhook_url="", email_enabled=True
        ),
    )
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r2")  # 9.70: below the new floor
    [event] = events()
    assert event.threshold == Decimal("9.80")


def test_a_call_is_charged_when_its_alerts_cannot_be_read(alice, alpha_group, alpha_model):
    alerts_set(alice, floor="9.90")
    table = connection.ops.quote_name(Notification._meta.db_table)
    moved = connection.ops.quote_name("notifications_moved_away")
    with connection.cursor() as cursor:  # the outbox is unreadable: its table is not where it was
        cursor.execute(f"ALTER TABLE {table} RENAME TO {moved}")
    try:
        alpha_call(credential_for(alice), alpha_group, FakeUpstream())
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {moved} RENAME TO {table}")
    charge = LedgerEntry.objects.get(kind="charge")
    assert (charge.amount, charge.balance_after) == (Decimal("-0.15"), Decimal("9.85"))
    assert Wallet.objects.get(account=alice).held == 0
    assert events() == []
