"""A Hypothesis state machine over top-up, reserve, capture, release and expiry: the ledger
invariants hold after every step, and a simple model predicts every balance."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from accounts.services import account_create
from billing.errors import InsufficientBalance
from billing.holds import hold_capture, hold_release, hold_reserve, holds_release_stale
from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, Wallet
from billing.selectors import ledger_check
from tests.ledger import wallet_ledger_sum

pytestmark = pytest.mark.django_db

AMOUNTS = st.decimals(min_value=Decimal("0.0001"), max_value=Decimal("5"), places=4)
_accounts = itertools.count()


class WalletMachine(RuleBasedStateMachine):
    holds = Bundle("holds")

    def __init__(self):
        super().__init__()
        # A fresh account per example: examples share the test's database.
        self.account = account_create(username=f"prop{next(_accounts)}")
        self.clock = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
        self.balance = Decimal("0")
        self.open: dict[int, Decimal] = {}
        self.charges = 0

    @rule(amount=AMOUNTS)
    def top_up(self, amount):
        wallet_top_up(account=self.account, amount=amount, reference="prop")
        self.balance += amount

    @rule(target=holds, amount=AMOUNTS, ttl=st.integers(min_value=60, max_value=3600))
    def reserve(self, amount, ttl):
        available = self.balance - sum(self.open.values(), Decimal("0"))
        try:
            hold = hold_reserve(
                account_id=self.account.pk, amount=amount, reference="prop", now=self.clock, ttl_seconds=ttl
            )
        except InsufficientBalance as refused:
            assert refused.code == "INSUFFICIENT_BALANCE"
            assert amount > available, "refused although the available balance covered it"
            return None
        assert amount <= available, "reserved more than the available balance"
        self.open[hold.pk] = amount
        return hold

    @rule(hold=consumes(holds))
    def capture(self, hold):
        if hold is None:
            return
        won = hold_capture(hold=hold, now=self.clock)
        assert won == (hold.pk in self.open), "capture must succeed exactly for an open hold"
        if won:
            self.balance -= self.open.pop(hold.pk)
            self.charges += 1

    @rule(hold=consumes(holds))
    def release(self, hold):
        if hold is None:
            return
        won = hold_release(hold=hold, now=self.clock)
        assert won == (hold.pk in self.open), "release must succeed exactly for an open hold"
        self.open.pop(hold.pk, None)

    @rule(hold=holds)
    def resolve_again(self, hold):
        # A second capture or release of a hold already resolved (or still open) never double-counts.
        if hold is None or hold.pk in self.open:
            return
        assert hold_capture(hold=hold, now=self.clock) is False
        assert hold_release(hold=hold, now=self.clock) is False

    @rule(seconds=st.integers(min_value=0, max_value=4000))
    def expire(self, seconds):
        self.clock += timedelta(seconds=seconds)
        holds_release_stale(now=self.clock)
        still_open = set(
            Hold.objects.filter(wallet__account=self.account, status=Hold.Status.OPEN).values_list(
                "pk", flat=True
            )
        )
        expected = {pk for pk, _ in self.open.items() if Hold.objects.get(pk=pk).expires_at > self.clock}
        assert still_open == expected
        self.open = {pk: amount for pk, amount in self.open.items() if pk in still_open}

    @invariant()
    def ledger_is_exact(self):
        wallet = Wallet.objects.get(account=self.account)
        held = sum(self.open.values(), Decimal("0"))
        assert wallet.balance == self.balance
        assert wallet_ledger_sum(wallet=wallet) == wallet.balance
        assert wallet.held == held
        assert wallet.balance - wallet.held >= 0
        assert LedgerEntry.objects.filter(wallet=wallet, kind="charge").count() == self.charges

    def teardown(self):
        assert ledger_check() == []


def test_ledger_invariants_hold_over_any_sequence_of_operations():
    run_state_machine_as_test(
        WalletMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
