"""metered_call: limits, reservation, the upstream call outside any transaction, capture or release."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction

from api.errors import api_error_for
from api.metering import metered_call, transaction_open_by_application
from api.usage import usage_scope
from billing.errors import (
    ConcurrencyLimitExceeded,
    InsufficientBalance,
    RateLimitExceeded,
    SubscriptionInvalid,
    SubscriptionNotFound,
    UsageLimitExceeded,
)
from billing.holds import hold_release
from billing.limits import concurrency_slot_acquire, rate_limit_hit
from billing.models import Hold, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.selectors import ledger_check
from billing.subscriptions import subscription_hold_reserve
from core.errors import ApiError, error_response
from groups.models import Group
from tests.billing.conftest import FakeUpstream, alpha_call, beta_call, credential_for, subscribe
from tests.rate_windows import rate_window_wait, window_key_ending
from upstreams.providers.base import UpstreamError

pytestmark = pytest.mark.django_db

# A Wednesday in the gateway's zone (UTC in tests).
WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


# --- wallet billing ---------------------------------------------------------------------------------


def test_it_charges_a_successful_call_once_with_the_request_id(alice, alpha_group, alpha_model):
    upstream = FakeUpstream(result={"data": [1]})
    result = alpha_call(credential_for(alice), alpha_group, upstream)
    assert result == {"data": [1]}
    assert upstream.calls == 1
    assert balance(alice) == Decimal("9.8500")
    charge = LedgerEntry.objects.get(kind="charge")
    assert (charge.amount, charge.reference) == (Decimal("-0.1500"), "req_1")
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.amount, record.model_id, record.group_id) == (
        200,
        "",
        Decimal("0.1500"),
        "alpha-image-2",
        alpha_group.pk,
    )
    assert record.billing == "balance"
    assert Hold.objects.get().status == Hold.Status.CAPTURED


def test_it_never_charges_a_failed_upstream_call_and_reraises_it_unchanged(alice, alpha_group, alpha_model):
    upstream = FakeUpstream(fail=True)
    with pytest.raises(UpstreamError) as failed:
        alpha_call(credential_for(alice), alpha_group, upstream)
    assert failed.value.status == 503
    assert balance(alice) == Decimal("10.0000")
    assert Wallet.objects.get(account=alice).held == 0
    assert Hold.objects.get().status == Hold.Status.RELEASED
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.amount) == (503, "upstream_error", Decimal("0"))


def test_it_releases_when_the_call_raises_an_api_error(alice, alpha_group, alpha_model):
    def call():
        raise ApiError("upstream said no", status=502, type="upstream_error", code="upstream_error")

    with pytest.raises(ApiError):
        alpha_call(credential_for(alice), alpha_group, call)
    assert balance(alice) == Decimal("10.0000")
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert UsageRecord.objects.get().status == 502


def test_it_refuses_insufficient_balance_before_calling_upstream(bob, alpha_group, alpha_model):
    upstream = FakeUpstream()
    with pytest.raises(InsufficientBalance) as refused:
        alpha_call(credential_for(bob), alpha_group, upstream)
    assert (api_error_for(refused.value).status, refused.value.code) == (403, "INSUFFICIENT_BALANCE")
    assert upstream.calls == 0
    assert not Hold.objects.exists()
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.amount) == (403, "INSUFFICIENT_BALANCE", Decimal("0"))


@pytest.mark.django_db(transaction=True)  # no test transaction around it: what a request sees
def test_it_runs_the_upstream_call_with_no_transaction_open(alice, alpha_group, alpha_model):
    seen = []

    def call():
        seen.append((connection.in_atomic_block, transaction_open_by_application()))
        return "ok"

    alpha_call(credential_for(alice), alpha_group, call)
    assert seen == [(False, False)]


@pytest.mark.django_db(transaction=True)
def test_it_refuses_to_run_inside_a_transaction_outside_a_test_transaction(alice, alpha_group, alpha_model):
    upstream = FakeUpstream()
    with pytest.raises(RuntimeError, match="transaction"), transaction.atomic():
        alpha_call(credential_for(alice), alpha_group, upstream)
    assert upstream.calls == 0
    assert not Hold.objects.exists()


def test_it_refuses_to_run_inside_a_transaction(alice, alpha_group, alpha_model):
    upstream = FakeUpstream()
    with pytest.raises(RuntimeError, match="transaction"), transaction.atomic():
        alpha_call(credential_for(alice), alpha_group, upstream)
    assert upstream.calls == 0


def test_it_releases_and_records_500_for_an_unexpected_exception(alice, alpha_group, alpha_model):
    def call():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        alpha_call(credential_for(alice), alpha_group, call)
    assert balance(alice) == Decimal("10.0000")
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code) == (500, "internal_error")
    assert ledger_check() == []


def test_it_charges_a_call_the_upstream_completed_even_if_the_client_left(alice, alpha_group, alpha_model):
    # Under WSGI a client disconnect does not interrupt the view: the call completes and is captured
    # (the image exists and the upstream billed us); what happens to the response afterwards does not
    # undo the charge.
    credential = credential_for(alice)
    with (
        pytest.raises(BrokenPipeError),
        usage_scope(request_id="req_gone", endpoint="images.generations", credential=credential) as u,
    ):
        metered_call(
            usage=u,
            credential=credential,
            group=alpha_group,
            model_id="alpha-image-2",
            price=Decimal("0.15"),
            call=FakeUpstream(),
        )
        raise BrokenPipeError("client went away while the response was written")
    assert balance(alice) == Decimal("9.8500")
    assert LedgerEntry.objects.filter(kind="charge", reference="req_gone").count() == 1
    record = UsageRecord.objects.get()
    assert (record.status, record.amount) == (500, Decimal("0.1500"))


# --- subscription billing ---------------------------------------------------------------------------


def test_it_counts_a_subscription_call_against_the_caps_not_the_wallet(carol, beta_group, beta_model):
    subscription = subscribe(carol, beta_group, daily="1")
    beta_call(
        credential_for(carol),
        beta_group,
        FakeUpstream(),
        now=WEDNESDAY_NOON,
    )
    assert balance(carol) == 0
    assert not LedgerEntry.objects.filter(wallet__account=carol).exists()
    used = dict(SubscriptionUsage.objects.filter(subscription=subscription).values_list("window", "used"))
    assert used == {w: Decimal("0.0200") for w in ("day", "week", "month", "total")}
    record = UsageRecord.objects.get()
    assert (record.billing, record.amount) == ("subscription", Decimal("0.0200"))
    assert ledger_check() == []


def test_it_refuses_without_a_subscription(carol, beta_group, beta_model):
    upstream = FakeUpstream()
    with pytest.raises(SubscriptionNotFound) as refused:
        beta_call(credential_for(carol), beta_group, upstream)
    answered = api_error_for(refused.value)
    assert (answered.status, answered.type, answered.code) == (
        403,
        "billing_error",
        "SUBSCRIPTION_NOT_FOUND",
    )
    assert upstream.calls == 0


def test_it_refuses_an_expired_subscription(carol, beta_group, beta_model):
    subscribe(carol, beta_group, expires_at=WEDNESDAY_NOON - timedelta(seconds=1))
    with pytest.raises(SubscriptionNotFound) as refused:
        beta_call(
            credential_for(carol),
            beta_group,
            FakeUpstream(),
            now=WEDNESDAY_NOON,
        )
    assert refused.value.code == "SUBSCRIPTION_NOT_FOUND"


def test_it_refuses_a_model_the_plan_does_not_cover(carol, beta_group, beta_model):
    subscribe(carol, beta_group, model_ids=["beta-imagine-image-quality"])
    upstream = FakeUpstream()
    with pytest.raises(SubscriptionInvalid) as refused:
        beta_call(credential_for(carol), beta_group, upstream)
    assert (api_error_for(refused.value).status, refused.value.code) == (403, "SUBSCRIPTION_INVALID")
    assert upstream.calls == 0
    subscribe(carol, beta_group, model_ids=["beta-imagine-image"])
    beta_call(credential_for(carol), beta_group, upstream, request_id="req_2")
    assert upstream.calls == 1


def test_it_refuses_over_the_daily_cap_with_retry_after_until_midnight(carol, beta_group, beta_model):
    subscribe(carol, beta_group, daily="0.04")
    credential = credential_for(carol)
    for n in range(2):
        beta_call(
            credential,
            beta_group,
            FakeUpstream(),
            request_id=f"r{n}",
            now=WEDNESDAY_NOON,
        )
    upstream = FakeUpstream()
    with pytest.raises(UsageLimitExceeded) as refused:
        beta_call(
            credential,
            beta_group,
            upstream,
            request_id="r3",
            now=WEDNESDAY_NOON,
        )
    answered = api_error_for(refused.value)
    assert (answered.status, answered.type, answered.code) == (
        429,
        "rate_limit_error",
        "USAGE_LIMIT_EXCEEDED",
    )
    assert api_error_for(refused.value).headers["Retry-After"] == str(12 * 3600)
    assert "daily cap" in refused.value.message
    assert upstream.calls == 0
    # The next day (time moved, not slept) the daily window is fresh again.
    beta_call(
        credential,
        beta_group,
        upstream,
        request_id="r4",
        now=WEDNESDAY_NOON + timedelta(days=1),
    )
    assert upstream.calls == 1


def test_it_blocks_on_the_weekly_cap_until_monday(carol, beta_group, beta_model):
    subscribe(carol, beta_group, daily="1", weekly="0.02")
    credential = credential_for(carol)
    beta_call(credential, beta_group, FakeUpstream(), now=WEDNESDAY_NOON)
    with pytest.raises(UsageLimitExceeded) as refused:
        beta_call(
            credential,
            beta_group,
            FakeUpstream(),
            now=WEDNESDAY_NOON + timedelta(days=1),
        )
    # Thursday 12:00 → Monday 00:00 is 3 days and 12 hours.
    assert api_error_for(refused.value).headers["Retry-After"] == str((3 * 24 + 12) * 3600)
    monday = datetime(2025, 1, 20, 0, 0, tzinfo=UTC)
    beta_call(credential, beta_group, FakeUpstream(), now=monday)


def test_it_blocks_on_the_monthly_cap_until_the_first(carol, beta_group, beta_model):
    subscribe(carol, beta_group, monthly="0.02")
    credential = credential_for(carol)
    beta_call(credential, beta_group, FakeUpstream(), now=WEDNESDAY_NOON)
    with pytest.raises(UsageLimitExceeded) as refused:
        beta_call(
            credential,
            beta_group,
            FakeUpstream(),
            now=datetime(2025, 1, 31, 23, 0, tzinfo=UTC),
        )
    assert api_error_for(refused.value).headers["Retry-After"] == "3600"
    beta_call(
        credential,
        beta_group,
        FakeUpstream(),
        now=datetime(2025, 2, 1, tzinfo=UTC),
    )


def test_the_total_cap_never_resets(carol, beta_group, beta_model):
    subscribe(carol, beta_group, daily="1", total="0.04")
    credential = credential_for(carol)
    beta_call(credential, beta_group, FakeUpstream(), now=WEDNESDAY_NOON)
    beta_call(
        credential,
        beta_group,
        FakeUpstream(),
        now=WEDNESDAY_NOON + timedelta(days=40),
    )
    with pytest.raises(UsageLimitExceeded) as refused:
        beta_call(
            credential,
            beta_group,
            FakeUpstream(),
            now=WEDNESDAY_NOON + timedelta(days=400),
        )
    assert "total cap" in refused.value.message and "never resets" in refused.value.message
    answer = error_response(api_error_for(refused.value), request=None)
    # Waiting cannot help: no Retry-After, and the official SDKs are told not to retry.
    assert "Retry-After" not in answer and answer["x-should-retry"] == "false"


def test_a_failed_subscription_call_gives_its_quota_back(carol, beta_group, beta_model):
    subscription = subscribe(carol, beta_group, daily="0.02")
    credential = credential_for(carol)
    with pytest.raises(UpstreamError):
        beta_call(
            credential,
            beta_group,
            FakeUpstream(fail=True),
            now=WEDNESDAY_NOON,
        )
    assert set(
        SubscriptionUsage.objects.filter(subscription=subscription).values_list("used", flat=True)
    ) == {0}
    beta_call(credential, beta_group, FakeUpstream(), now=WEDNESDAY_NOON)
    assert ledger_check() == []


def test_windows_follow_the_gateway_timezone(carol, beta_group, beta_model, settings):
    settings.GATEWAY_TIMEZONE = "Asia/Shanghai"  # UTC+8: the local day ends at 16:00 UTC
    subscribe(carol, beta_group, daily="0.02")
    credential = credential_for(carol)
    beta_call(
        credential,
        beta_group,
        FakeUpstream(),
        now=datetime(2025, 1, 15, 15, 0, tzinfo=UTC),
    )
    with pytest.raises(UsageLimitExceeded) as refused:
        beta_call(
            credential,
            beta_group,
            FakeUpstream(),
            now=datetime(2025, 1, 15, 15, 30, tzinfo=UTC),
        )
    assert api_error_for(refused.value).headers["Retry-After"] == "1800"
    beta_call(
        credential,
        beta_group,
        FakeUpstream(),
        now=datetime(2025, 1, 15, 16, 0, tzinfo=UTC),
    )


def test_a_subscription_hold_released_after_midnight_returns_the_quota_to_its_own_day(
    carol, beta_group, beta_model
):
    subscription = subscribe(carol, beta_group, daily="0.02")
    hold = subscription_hold_reserve(
        subscription=subscription, amount=Decimal("0.02"), reference="r", now=WEDNESDAY_NOON
    )
    beta_call(
        credential_for(carol),
        beta_group,
        FakeUpstream(),
        now=WEDNESDAY_NOON + timedelta(days=1),
    )
    assert hold_release(hold=hold) is True
    day_rows = dict(
        SubscriptionUsage.objects.filter(subscription=subscription, window="day").values_list(
            "window_start", "used"
        )
    )
    assert day_rows == {
        WEDNESDAY_NOON.date(): Decimal("0"),
        (WEDNESDAY_NOON + timedelta(days=1)).date(): Decimal("0.0200"),
    }
    assert ledger_check() == []


# --- rate and concurrency limits --------------------------------------------------------------------


def test_it_refuses_the_request_over_rpm_with_retry_after(alice, alpha_group, alpha_model):
    Group.objects.filter(pk=alpha_group.pk).update(rpm=3)
    group = Group.objects.get(pk=alpha_group.pk)  # staff changed it: read per request
    credential = credential_for(alice)
    rate_window_wait(credential.limit_key)
    upstream = FakeUpstream()
    for n in range(3):
        alpha_call(credential, group, upstream, request_id=f"r{n}")
    with pytest.raises(RateLimitExceeded) as refused:
        alpha_call(credential, group, upstream, request_id="r4")
    answered = api_error_for(refused.value)
    assert (answered.status, answered.type) == (
        429,
        "rate_limit_error",
    )
    assert 1 <= int(api_error_for(refused.value).headers["Retry-After"]) <= 60
    assert upstream.calls == 3
    assert balance(alice) == Decimal("9.5500")  # the refused call was not charged
    # Another credential of the same account has its own count.
    alpha_call(credential_for(alice), group, upstream, request_id="r5")
    assert UsageRecord.objects.filter(status=429).count() == 1


def test_a_client_that_waits_the_retry_after_it_was_given_is_counted_in_the_next_window():
    # A credential whose window ends one second after this one (the ends are staggered per key): the
    # refusal comes with little of the window left, the part of a second included.
    limit_key = window_key_ending(candidate=lambda: f"api_key:test-{uuid.uuid4().hex}", time_left=1)
    rate_limit_hit(limit_key=limit_key, rpm=1)
    with pytest.raises(RateLimitExceeded) as refused:
        rate_limit_hit(limit_key=limit_key, rpm=1)
    waited = int(api_error_for(refused.value).headers["Retry-After"])
    assert 1 <= waited <= 2

    time.sleep(waited)

    rate_limit_hit(limit_key=limit_key, rpm=1)  # not refused: a new window, counted afresh
    with pytest.raises(RateLimitExceeded):
        rate_limit_hit(limit_key=limit_key, rpm=1)


def test_it_refuses_a_call_over_the_concurrency_limit_and_frees_the_slot_after(
    alice, alpha_group, alpha_model
):
    Group.objects.filter(pk=alpha_group.pk).update(concurrency=1)
    group = Group.objects.get(pk=alpha_group.pk)
    credential = credential_for(alice)
    inner_refusals = []

    def call_that_tries_a_second_call():
        # A second call of the same credential while this one is in flight.
        try:
            alpha_call(credential, group, FakeUpstream(), request_id="inner")
        except ConcurrencyLimitExceeded as exc:
            inner_refusals.append(exc)
        return "ok"

    alpha_call(credential, group, call_that_tries_a_second_call, request_id="outer")
    assert len(inner_refusals) == 1
    assert inner_refusals[0].code == "concurrency_limit_exceeded"
    assert api_error_for(inner_refusals[0]).headers["Retry-After"] == "1"
    # The slot is free again after the call.
    alpha_call(credential, group, FakeUpstream(), request_id="after")


@pytest.mark.parametrize(
    "outcome",
    ["success", "upstream_error", "api_error", "unexpected_exception", "worker_abort", "refused_reserve"],
)
def test_the_concurrency_slot_is_released_on_every_exit_path(outcome, alice, bob, alpha_group, alpha_model):
    Group.objects.filter(pk=alpha_group.pk).update(concurrency=1)
    group = Group.objects.get(pk=alpha_group.pk)

    class WorkerAbort(BaseException):
        """What a killed gthread worker's SystemExit looks like to the code it interrupts."""

    def call():
        if outcome == "upstream_error":
            raise UpstreamError("boom", status=502, retryable=True)
        if outcome == "api_error":
            raise ApiError("bad", status=400)
        if outcome == "unexpected_exception":
            raise ZeroDivisionError
        if outcome == "worker_abort":
            raise WorkerAbort
        return "ok"

    account = bob if outcome == "refused_reserve" else alice
    credential = credential_for(account)
    expected = {
        "upstream_error": UpstreamError,
        "api_error": ApiError,
        "unexpected_exception": ZeroDivisionError,
        "worker_abort": WorkerAbort,
        "refused_reserve": InsufficientBalance,
    }.get(outcome)
    if expected is None:
        alpha_call(credential, group, call, request_id="first")
    else:
        with pytest.raises(expected):
            alpha_call(credential, group, call, request_id="first")
    # The slot was given back: the credential's one slot can be taken again.
    slot = concurrency_slot_acquire(limit_key=credential.limit_key, limit=1, ttl_seconds=60)
    assert slot is not None
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert ledger_check() == []


def test_it_refuses_before_reserving_when_rate_limited(alice, alpha_group, alpha_model):
    Group.objects.filter(pk=alpha_group.pk).update(rpm=1)
    group = Group.objects.get(pk=alpha_group.pk)
    credential = credential_for(alice)
    rate_window_wait(credential.limit_key)
    alpha_call(credential, group, FakeUpstream())
    with pytest.raises(RateLimitExceeded):
        alpha_call(credential, group, FakeUpstream(), request_id="r2")
    assert Hold.objects.count() == 1


def test_transaction_check_ignores_only_the_test_case_wrapper():
    assert connection.in_atomic_block  # pytest-django's per-test transaction
    assert transaction_open_by_application() is False
    with transaction.atomic():
        assert transaction_open_by_application() is True
        with transaction.atomic():
            assert transaction_open_by_application() is True
    assert transaction_open_by_application() is False
