"""Capturing less than was reserved (a text call's exact cost under its ceiling): the charge is the
cost, the rest of the hold goes back, on both databases; amounts keep 8 decimal places."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing.holds import hold_capture, hold_release, hold_reserve
from billing.models import Hold, LedgerEntry, SubscriptionUsage, Wallet
from billing.money import money_round_up, money_str
from billing.selectors import ledger_check
from billing.subscriptions import subscription_hold_reserve
from tests.billing.conftest import subscribe

pytestmark = pytest.mark.django_db


def wallet_of(account) -> Wallet:
    return Wallet.objects.get(account=account)


def test_it_charges_the_cost_and_releases_the_rest_of_the_hold(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.04"), reference="req_text")
    assert hold_capture(hold=hold, amount=Decimal("0.000024")) is True

    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("9.999976"), Decimal("0"))
    charge = LedgerEntry.objects.get(wallet=wallet, kind="charge")
    assert (charge.amount, charge.balance_after, charge.reference) == (
        Decimal("-0.000024"),
        Decimal("9.999976"),
        "req_text",
    )
    stored = Hold.objects.get(pk=hold.pk)
    assert (stored.status, stored.amount, stored.captured_amount) == (
        "captured",
        Decimal("0.04"),
        Decimal("0.000024"),
    )
    assert ledger_check() == []


def test_it_never_charges_more_than_was_reserved(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.01"), reference="req_over")
    assert hold_capture(hold=hold, amount=Decimal("5")) is True

    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("9.99"), Decimal("0"))
    assert Hold.objects.get(pk=hold.pk).captured_amount == Decimal("0.01")
    assert ledger_check() == []


def test_a_capture_of_nothing_resolves_the_hold_without_a_ledger_entry(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.5"), reference="req_zero")
    assert hold_capture(hold=hold, amount=Decimal("0")) is True

    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("10"), Decimal("0"))
    assert not LedgerEntry.objects.filter(wallet=wallet, kind="charge").exists()
    assert hold_release(hold=hold) is False  # resolved once
    assert ledger_check() == []


def test_a_partial_capture_gives_the_rest_back_to_every_subscription_window(carol, beta_group):
    subscription = subscribe(carol, beta_group, daily="1", total="2")
    now = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
    hold = subscription_hold_reserve(subscription=subscription, amount=Decimal("0.8"), reference="r", now=now)
    assert hold_capture(hold=hold, amount=Decimal("0.00012345")) is True

    used = dict(SubscriptionUsage.objects.filter(subscription=subscription).values_list("window", "used"))
    assert used == {w: Decimal("0.00012345") for w in ("day", "week", "month", "total")}
    assert ledger_check() == []


def test_a_computed_charge_rounds_up_at_the_eighth_place_and_never_to_zero():
    assert money_round_up(Decimal("12") * Decimal("2") / Decimal(1_000_000)) == Decimal("0.000024")
    assert money_round_up(Decimal("1") * Decimal("0.001") / Decimal(1_000_000)) == Decimal("0.00000001")
    assert money_round_up(Decimal("0.000000010000001")) == Decimal("0.00000002")
    assert money_round_up(Decimal("0")) == Decimal("0")
    assert money_str(Decimal("0")) == "0.00000000"
