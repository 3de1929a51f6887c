"""Key budget windows under racing resolutions: PostgreSQL, real threads, one connection each.

Reservations, captures for less, releases and expiries of holds counted in one key's window run at
once: each hold gives back exactly once, no statement deadlocks (every one takes the wallet's row, or
the subscription's counters, before the key's), and the window ends equal to its holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.errors import UsageLimitExceeded
from billing.holds import hold_capture, hold_release, hold_reserve, holds_release_stale
from billing.key_budgets import KeyBudget
from billing.models import Hold, KeyBudgetUsage
from billing.selectors import ledger_check
from billing.subscriptions import subscription_hold_reserve
from keys.services import ApiKeyLimitsInput, api_key_create
from tests.billing.conftest import postgres_only, run_concurrently, subscribe

pytestmark = [pytest.mark.postgres, postgres_only, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("0.10")


def key_budget_make(account, group, budget: str) -> KeyBudget:
    api_key, _ = api_key_create(
        account=account, group=group, limits=ApiKeyLimitsInput(budget=budget, budget_period="daily")
    )
    return KeyBudget(api_key_id=api_key.pk, budget=api_key.budget, period="daily")


def window_total(key_budget: KeyBudget) -> Decimal:
    return KeyBudgetUsage.objects.get(api_key_id=key_budget.api_key_id).used


def test_captures_releases_expiries_and_new_reservations_of_one_key_resolve_each_hold_once(
    alice, alpha_group
):
    start = datetime.now(tz=UTC)
    key_budget = key_budget_make(alice, alpha_group, "3.50")  # the 30 holds, and room for 5 more
    holds = [
        hold_reserve(
            account_id=alice.pk,
            amount=PRICE,
            reference=f"r{i}",
            now=start,
            ttl_seconds=60,
            key_budget=key_budget,
        )
        for i in range(30)
    ]
    expiry_passed = start + timedelta(seconds=61)

    def worker(i):
        if i < 20:  # late captures for less, racing the expiries
            return hold_capture(hold=holds[i], amount=Decimal("0.03"))
        if i < 30:  # failed calls, released
            return hold_release(hold=holds[i])
        if i < 34:  # the stale-hold cron on "many machines"
            return holds_release_stale(now=expiry_passed, batch_size=7)
        try:  # new calls on the same key and wallet meanwhile
            hold_reserve(account_id=alice.pk, amount=PRICE, reference=f"new{i}", key_budget=key_budget)
        except UsageLimitExceeded:
            return "refused"
        return "reserved"

    outcomes = run_concurrently(worker, 44)

    assert all(status == "ok" for status, _ in outcomes), outcomes  # no deadlock, no error
    captured = Hold.objects.filter(status=Hold.Status.CAPTURED)
    assert captured.count() == sum(1 for _, value in outcomes[:20] if value is True)
    assert Hold.objects.filter(reference__startswith="r", status=Hold.Status.OPEN).count() == 0
    new_open = Hold.objects.filter(reference__startswith="new", status=Hold.Status.OPEN).count()
    assert new_open == sum(1 for _, value in outcomes[34:] if value == "reserved")
    assert window_total(key_budget) == Decimal("0.03") * captured.count() + PRICE * new_open
    assert ledger_check() == []


def test_subscription_holds_of_one_key_racing_new_reservations_never_deadlock_or_overspend(carol, beta_group):
    subscription = subscribe(carol, beta_group, daily="100")
    key_budget = key_budget_make(carol, beta_group, "1.00")
    holds = [
        subscription_hold_reserve(
            subscription=subscription, amount=PRICE, reference=f"r{i}", key_budget=key_budget
        )
        for i in range(10)
    ]

    def worker(i):
        if i < 5:
            return hold_capture(hold=holds[i], amount=Decimal("0.01"))
        if i < 10:
            return hold_release(hold=holds[i])
        try:
            subscription_hold_reserve(
                subscription=subscription, amount=PRICE, reference=f"new{i}", key_budget=key_budget
            )
        except UsageLimitExceeded:
            return "refused"
        return "reserved"

    outcomes = run_concurrently(worker, 30)

    assert all(status == "ok" for status, _ in outcomes), outcomes
    assert [value for _, value in outcomes[:10]] == [True] * 10
    reserved = sum(1 for _, value in outcomes[10:] if value == "reserved")
    # Room for ten calls in all, the ten holds taking it at first: whatever the interleaving, the
    # window ends equal to its holds and within its budget.
    assert window_total(key_budget) == Decimal("0.01") * 5 + PRICE * reserved <= key_budget.budget
    assert ledger_check() == []
