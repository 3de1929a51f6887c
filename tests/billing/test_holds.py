"""Holds on wallets: reserve, capture, release, expiry; each resolves exactly once; the ledger stays exact."""

from __future__ import annotations

import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from api.errors import api_error_for
from billing.errors import InsufficientBalance
from billing.holds import hold_capture, hold_release, hold_reserve, holds_release_stale
from billing.ledger import InsufficientFunds, wallet_adjust, wallet_top_up
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from core.process_identity import process_owner
from tests.billing.conftest import usage_record_draft
from tests.ledger import wallet_ledger_sum

pytestmark = pytest.mark.django_db


def wallet_of(account) -> Wallet:
    return Wallet.objects.get(account=account)


def test_it_reserves_by_raising_held_without_touching_the_balance(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_1")
    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held, wallet.available) == (
        Decimal("10.0000"),
        Decimal("0.1500"),
        Decimal("9.8500"),
    )
    assert hold.status == Hold.Status.OPEN
    assert hold.expires_at > timezone.now()


def test_it_refuses_a_reserve_above_the_available_balance_and_reserves_nothing(alice):
    hold_reserve(account_id=alice.pk, amount=Decimal("9.90"), reference="req_1")
    with pytest.raises(InsufficientBalance) as refused:
        hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_2")
    answered = api_error_for(refused.value)
    assert (answered.status, answered.type, answered.code) == (
        403,
        "billing_error",
        "INSUFFICIENT_BALANCE",
    )
    assert wallet_of(alice).held == Decimal("9.9000")
    assert Hold.objects.filter(reference="req_2").count() == 0


def test_it_refuses_a_reserve_for_an_empty_wallet(bob):
    with pytest.raises(InsufficientBalance):
        hold_reserve(account_id=bob.pk, amount=Decimal("0.02"), reference="req_1")


def test_it_captures_a_hold_into_one_ledger_charge_with_the_request_id(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_abc")
    assert hold_capture(hold=hold) is True
    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("9.8500"), Decimal("0"))
    charge = LedgerEntry.objects.get(wallet=wallet, kind="charge")
    assert (charge.amount, charge.balance_after, charge.reference) == (
        Decimal("-0.1500"),
        Decimal("9.8500"),
        "req_abc",
    )
    assert wallet_ledger_sum(wallet=wallet) == wallet.balance


def test_it_captures_a_hold_only_once(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_1")
    assert hold_capture(hold=hold) is True
    assert hold_capture(hold=hold) is False
    assert hold_release(hold=hold) is False
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert wallet_of(alice).balance == Decimal("9.8500")


def test_it_releases_a_hold_without_charging_and_only_once(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_1")
    assert hold_release(hold=hold) is True
    assert hold_release(hold=hold) is False
    assert hold_capture(hold=hold) is False  # a late capture after release charges nothing
    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("10.0000"), Decimal("0"))
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    hold.refresh_from_db()
    assert hold.status == Hold.Status.RELEASED


def test_it_leaves_alone_a_hold_whose_id_now_belongs_to_another_call(alice):
    # A reservation lost in a database crash can take its id with it (billing/statements.py): the
    # next call's hold may get that id while the call that lost it still holds it in memory.
    theirs = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_theirs")
    lost = Hold.objects.get(pk=theirs.pk)
    lost.reference, lost.amount = "req_lost", Decimal("5.00")
    record = usage_record_draft(alice, request_id="req_lost")

    assert hold_capture(hold=lost, usage_record=record) is False
    assert hold_release(hold=lost) is False

    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("10.0000"), Decimal("0.1500"))
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert Hold.objects.get(pk=theirs.pk).status == Hold.Status.OPEN
    assert UsageRecord.objects.get(request_id="req_lost").amount == Decimal("0")
    assert hold_capture(hold=theirs) is True  # the hold's own call still charges it, once
    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("9.8500"), Decimal("0"))
    assert LedgerEntry.objects.get(kind="charge").reference == "req_theirs"
    assert ledger_check() == []


def test_it_expires_only_holds_past_their_expiry(alice):
    now = timezone.now()
    old = hold_reserve(account_id=alice.pk, amount=Decimal("1"), reference="req_old", now=now, ttl_seconds=60)
    fresh = hold_reserve(
        account_id=alice.pk, amount=Decimal("2"), reference="req_new", now=now, ttl_seconds=600
    )
    assert holds_release_stale(now=now + timedelta(seconds=61)) == 1
    old.refresh_from_db()
    fresh.refresh_from_db()
    assert (old.status, fresh.status) == (Hold.Status.EXPIRED, Hold.Status.OPEN)
    assert wallet_of(alice).held == Decimal("2.0000")
    assert holds_release_stale(now=now + timedelta(seconds=61)) == 0


def test_it_releases_an_abandoned_hold_and_a_late_capture_does_not_charge(alice):
    # A worker reserved, then was killed before capture or release: only the hold row remains.
    abandoned = hold_reserve(
        account_id=alice.pk, amount=Decimal("0.15"), reference="req_killed", ttl_seconds=60
    )
    later = timezone.now() + timedelta(minutes=5)
    out = io.StringIO()
    call_command("release_stale_holds", stdout=out)  # not stale yet: nothing to do
    assert out.getvalue().strip() == "Released 0 stale hold(s)."
    assert wallet_of(alice).held == Decimal("0.1500")
    assert holds_release_stale(now=later) == 1
    assert hold_capture(hold=abandoned) is False
    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held) == (Decimal("10.0000"), Decimal("0"))
    assert ledger_check() == []


def test_it_keeps_money_under_open_holds_out_of_reach_of_adjustments(alice):
    hold_reserve(account_id=alice.pk, amount=Decimal("9.00"), reference="req_1")
    with pytest.raises(InsufficientFunds):
        wallet_adjust(account=alice, amount="-1.50", note="correction")
    wallet_adjust(account=alice, amount="-1.00", note="correction")
    wallet = wallet_of(alice)
    assert (wallet.balance, wallet.held, wallet.available) == (Decimal("9"), Decimal("9"), Decimal("0"))


def test_it_charges_nothing_for_a_free_model_but_resolves_its_hold(alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0"), reference="req_free")
    assert hold_capture(hold=hold) is True
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert ledger_check() == []


def test_it_refuses_float_amounts(alice):
    with pytest.raises(ValueError, match="float"):
        hold_reserve(account_id=alice.pk, amount=0.15, reference="req_1")


def test_check_ledger_passes_on_a_consistent_database(alice, bob, capsys):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_1")
    hold_capture(hold=hold)
    hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_2")
    wallet_top_up(account=bob, amount="1")
    call_command("check_ledger")
    assert "Ledger OK" in capsys.readouterr().out


def test_check_ledger_fails_loudly_when_a_balance_moved_outside_the_ledger(alice, capsys):
    # Someone "fixed" a balance in SQL: the ledger no longer adds up.
    Wallet.objects.filter(account=alice).update(balance=Decimal("11"))
    with pytest.raises(CommandError) as failed:
        call_command("check_ledger")
    assert failed.value.returncode == 1
    report = capsys.readouterr().err
    assert "balance ¥11.00 != sum of ledger entries ¥10.00" in report
    assert "wallet #" in report


def test_check_ledger_fails_when_held_does_not_match_the_open_holds(alice):
    hold_reserve(account_id=alice.pk, amount=Decimal("1"), reference="req_1")
    Wallet.objects.filter(account=alice).update(held=Decimal("0.5"))
    problems = [str(p) for p in ledger_check()]
    assert any("held ¥0.50 != sum of open holds ¥1.00" in p for p in problems)


def test_every_change_of_a_wallet_moves_its_updated_at(alice):
    def backdate() -> None:
        Wallet.objects.filter(account=alice).update(updated_at=timezone.now() - timedelta(days=1))

    def moved() -> bool:
        return wallet_of(alice).updated_at > timezone.now() - timedelta(minutes=1)

    backdate()
    wallet_top_up(account=alice, amount="1")
    assert moved()
    backdate()
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_u1")
    assert moved()
    backdate()
    hold_capture(hold=hold, amount=Decimal("0.10"))
    assert moved()
    other = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_u2")
    backdate()
    hold_release(hold=other)
    assert moved()


def test_a_dead_processs_open_holds_are_released_and_its_captured_ones_kept(alice):
    gone = hold_reserve(account_id=alice.pk, amount=Decimal("1.00"), reference="req_gone")
    captured = hold_reserve(account_id=alice.pk, amount=Decimal("2.00"), reference="req_captured")
    hold_capture(hold=captured)
    other = hold_reserve(account_id=alice.pk, amount=Decimal("3.00"), reference="req_other")
    Hold.objects.filter(pk=other.pk).update(owner="another-instance:1")
    assert gone.owner == process_owner()

    out = io.StringIO()
    call_command("worker_gone", process_owner(), stdout=out)

    assert "released 1 hold(s)" in out.getvalue()
    statuses = dict(Hold.objects.values_list("reference", "status"))
    assert statuses == {"req_gone": "released", "req_captured": "captured", "req_other": "open"}
    assert Wallet.objects.get(account=alice).held == Decimal("3.00")
    assert ledger_check() == []
