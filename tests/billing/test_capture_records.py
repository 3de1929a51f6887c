"""Exactly one usage record per billed call, whichever way it ends: the capture of a successful call
writes it together with the charge, and the usage scope writes it for every other call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from api.errors import api_error_for
from api.metering import metered_call
from api.usage import usage_scope
from billing.errors import UsageLimitExceeded
from billing.holds import hold_capture, hold_release, hold_reserve, holds_release_stale
from billing.models import Hold, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.selectors import ledger_check
from billing.subscriptions import subscription_hold_reserve
from core.errors import ApiError
from tests.billing.conftest import (
    FakeUpstream,
    alpha_call,
    beta_call,
    credential_for,
    subscribe,
    usage_record_draft,
)
from upstreams.providers.base import UpstreamError

pytestmark = pytest.mark.django_db

PRICE = Decimal("0.15")
WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
CAP_NAMES = {"day": "daily", "week": "weekly", "month": "monthly", "total": "total"}


def wallet_of(account) -> Wallet:
    return Wallet.objects.get(account=account)


def test_it_writes_a_successful_calls_record_with_its_capture_and_no_second_one(
    alice, alpha_group, alpha_model
):
    credential = credential_for(alice)
    with usage_scope(request_id="req_ok", endpoint="images.generations", credential=credential) as usage:
        usage.set_upstream("demo")
        metered_call(
            usage=usage,
            credential=credential,
            group=alpha_group,
            model_id="alpha-image-2",
            price=PRICE,
            call=FakeUpstream(),
        )
        # Written by the capture, before the scope ends.
        assert usage.record is not None
        assert UsageRecord.objects.get().pk == usage.record.pk
    record = UsageRecord.objects.get()
    assert (record.request_id, record.status, record.error_code, record.amount) == ("req_ok", 200, "", PRICE)
    assert (record.group_id, record.model_id, record.billing, record.upstream) == (
        alpha_group.pk,
        "alpha-image-2",
        "balance",
        "demo",
    )
    assert LedgerEntry.objects.get(kind="charge").reference == "req_ok"
    assert wallet_of(alice).balance == Decimal("9.85")


def test_it_records_a_failed_call_once_uncharged(alice, alpha_group, alpha_model):
    credential = credential_for(alice)
    with pytest.raises(UpstreamError):
        alpha_call(credential, alpha_group, FakeUpstream(fail=True), request_id="req_bad")
    assert UsageRecord.objects.values_list("status", "error_code", "amount").get() == (
        503,
        "upstream_error",
        Decimal("0"),
    )
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("10"), Decimal("0"))


def test_a_call_whose_hold_expired_meanwhile_is_delivered_uncharged_and_recorded_once_at_zero(
    alice, alpha_group, alpha_model
):
    credential = credential_for(alice)

    def slow_call():
        # The call outlived its hold: release_stale_holds (cron, another machine) voided it meanwhile.
        assert holds_release_stale(now=timezone.now() + timedelta(days=1)) == 1
        return "image"

    with usage_scope(request_id="req_late", endpoint="images.generations", credential=credential) as usage:
        result = metered_call(
            usage=usage,
            credential=credential,
            group=alpha_group,
            model_id="alpha-image-2",
            price=PRICE,
            call=slow_call,
        )
    assert result == "image"
    assert usage.charged == 0
    assert UsageRecord.objects.values_list("status", "amount").get() == (200, Decimal("0"))
    assert Hold.objects.get().status == Hold.Status.EXPIRED
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("10"), Decimal("0"))
    assert ledger_check() == []


def test_a_call_failing_after_its_capture_keeps_one_record_with_the_error_and_the_charge(
    alice, alpha_group, alpha_model
):
    credential = credential_for(alice)
    with (
        pytest.raises(ApiError),
        usage_scope(request_id="req_after", endpoint="images.generations", credential=credential) as usage,
    ):
        metered_call(
            usage=usage,
            credential=credential,
            group=alpha_group,
            model_id="alpha-image-2",
            price=PRICE,
            call=FakeUpstream(),
        )
        # E.g. storing the response for its Idempotency-Key failed: the call was charged all the same.
        raise ApiError("could not store the response", status=503, type="api_error", code="store_failed")
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.amount) == (503, "store_failed", PRICE)
    assert LedgerEntry.objects.get(kind="charge").amount == -PRICE
    assert wallet_of(alice).balance == Decimal("9.85")


def test_a_subscription_call_is_recorded_once_with_the_amount_counted(carol, beta_group, beta_model):
    subscribe(carol, beta_group, daily="1")
    credential = credential_for(carol)
    beta_call(
        credential,
        beta_group,
        FakeUpstream(),
        request_id="req_sub",
        now=WEDNESDAY_NOON,
    )
    record = UsageRecord.objects.get()
    assert (record.status, record.billing, record.amount) == (200, "subscription", Decimal("0.02"))
    assert Hold.objects.get().status == Hold.Status.CAPTURED
    assert not LedgerEntry.objects.exists()
    assert ledger_check() == []


def test_a_capture_that_loses_to_a_release_records_zero_and_charges_nothing(alice):
    hold = hold_reserve(account_id=alice.pk, amount=PRICE, reference="req_1")
    assert hold_release(hold=hold) is True
    record = usage_record_draft(alice)
    assert hold_capture(hold=hold, usage_record=record) is False
    assert UsageRecord.objects.values_list("pk", "amount").get() == (record.pk, Decimal("0"))
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("10"), Decimal("0"))


@pytest.mark.django_db(transaction=True)  # the refused record is only refused when its transaction commits
def test_a_usage_record_the_database_refuses_does_not_keep_the_call_from_being_charged(alice):
    hold = hold_reserve(account_id=alice.pk, amount=PRICE, reference="req_1")
    record = usage_record_draft(alice)
    record.group_id = 999_999  # its group was deleted while the call was in flight
    assert hold_capture(hold=hold, usage_record=record) is True
    assert record.pk is None  # left for the usage scope to write the usual way
    assert not UsageRecord.objects.exists()
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("9.85"), Decimal("0"))
    assert Hold.objects.get().status == Hold.Status.CAPTURED
    assert ledger_check() == []

    # The statement that failed runs again for the next call (its cursor is kept per connection).
    second = hold_reserve(account_id=alice.pk, amount=PRICE, reference="req_2")
    second_record = usage_record_draft(alice)
    assert hold_capture(hold=second, usage_record=second_record) is True
    assert UsageRecord.objects.values_list("pk", "amount").get() == (second_record.pk, PRICE)
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("9.70"), Decimal("0"))
    assert ledger_check() == []


@pytest.mark.parametrize("refused_window", ["day", "week", "month", "total"])
def test_a_subscription_call_refused_by_any_one_window_counts_in_none(carol, beta_group, refused_window):
    caps = {name: "1" for name in CAP_NAMES.values()}
    caps[CAP_NAMES[refused_window]] = "0.03"
    subscription = subscribe(carol, beta_group, **caps)
    first = subscription_hold_reserve(
        subscription=subscription, amount=Decimal("0.02"), reference="req_1", now=WEDNESDAY_NOON
    )
    with pytest.raises(UsageLimitExceeded) as refused:
        subscription_hold_reserve(
            subscription=subscription, amount=Decimal("0.02"), reference="req_2", now=WEDNESDAY_NOON
        )
    assert (api_error_for(refused.value).status, refused.value.code) == (429, "USAGE_LIMIT_EXCEEDED")
    assert f"the {CAP_NAMES[refused_window]} cap of ¥0.03 (" in refused.value.message
    # All or none: the windows counted before the refused one were rolled back.
    used = dict(SubscriptionUsage.objects.values_list("window", "used"))
    assert used == {window: Decimal("0.02") for window in CAP_NAMES}
    assert list(Hold.objects.values_list("pk", flat=True)) == [first.pk]
    assert hold_release(hold=first) is True
    assert set(SubscriptionUsage.objects.values_list("used", flat=True)) == {Decimal("0")}
    assert ledger_check() == []


def test_a_first_call_above_a_cap_creates_no_counter(carol, beta_group):
    subscription = subscribe(carol, beta_group, weekly="0.01")
    with pytest.raises(UsageLimitExceeded) as refused:
        subscription_hold_reserve(
            subscription=subscription, amount=Decimal("0.02"), reference="req_1", now=WEDNESDAY_NOON
        )
    assert "the weekly cap of ¥0.01 (" in refused.value.message
    assert not SubscriptionUsage.objects.exists()
    assert not Hold.objects.exists()
