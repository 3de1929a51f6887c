"""Concurrent charges crossing the same line write one event: PostgreSQL, real threads, one
connection each."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing.ledger import wallet_top_up
from billing.models import Wallet
from notifications.models import Notification
from tests.billing.conftest import (
    FakeUpstream,
    alpha_call,
    beta_call,
    credential_for,
    postgres_only,
    run_concurrently,
    subscribe,
)
from tests.notifications.conftest import alerts_set

pytestmark = [pytest.mark.postgres, postgres_only, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("0.15")
WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


def slow(inner: FakeUpstream, seconds: float = 0.02):
    def call():
        time.sleep(seconds)
        return inner()

    return call


def test_concurrent_charges_below_the_floor_write_one_event(bob, alpha_group, alpha_model):
    wallet_top_up(account=bob, amount=PRICE * 20, reference="test")  # 3.00
    alerts_set(bob, floor="1.00")
    credential = credential_for(bob)
    outcomes = run_concurrently(
        lambda i: alpha_call(credential, alpha_group, slow(FakeUpstream()), request_id=f"r{i}"), 20
    )
    assert [status for status, _ in outcomes] == ["ok"] * 20
    assert Wallet.objects.get(account=bob).balance == Decimal("0")
    [event] = Notification.objects.all()
    assert (event.kind, event.threshold, event.window) == ("balance.below_floor", Decimal("1"), "0")
    assert Decimal(event.payload["available_balance"]) < Decimal("1")


def test_concurrent_calls_reaching_a_cap_write_one_event_per_percentage(carol, beta_group, beta_model):
    subscribe(carol, beta_group, daily="0.40")  # 20 calls at 0.02
    credential = credential_for(carol)
    outcomes = run_concurrently(
        lambda i: beta_call(
            credential, beta_group, slow(FakeUpstream()), request_id=f"s{i}", now=WEDNESDAY_NOON
        ),
        20,
    )
    assert [status for status, _ in outcomes] == ["ok"] * 20
    rows = Notification.objects.filter(subject__endswith=":day").values_list("threshold", "window")
    assert sorted(rows) == [(Decimal("80"), "2025-01-15"), (Decimal("100"), "2025-01-15")]
    assert Notification.objects.count() == 2
