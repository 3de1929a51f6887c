"""API key budgets on the holds (billing/key_budgets.py): a call on a key with a budget counts its
price in the key's current window with its wallet or subscription hold, a capture for less, a
release, an expiry and a dead worker give back exactly once, and a window without room refuses with
429 USAGE_LIMIT_EXCEEDED, nothing reserved. Both databases; the concurrent cases are in
tests/images and tests/chat (PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from api.errors import api_error_for
from api.metering import metered_call
from api.usage import usage_scope
from billing.errors import InsufficientBalance, UsageLimitExceeded
from billing.holds import hold_capture, hold_release, hold_reserve, holds_release_owner, holds_release_stale
from billing.key_budgets import KeyBudget, key_budget_precheck
from billing.models import Hold, KeyBudgetUsage, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.selectors import api_key_budget_window_get, ledger_check
from billing.subscriptions import subscription_hold_reserve
from billing.windows import window_zone
from core.errors import error_response
from core.process_identity import process_owner
from keys.authentication import credential_verify
from keys.services import ApiKeyLimitsInput, api_key_create
from tests.billing.conftest import (
    ALPHA_PRICE,
    BETA_PRICE,
    FakeUpstream,
    alpha_call,
    beta_call,
    subscribe,
)
from tests.billing.test_round_trips import assert_sent_on_postgresql, statements_sent
from upstreams.providers.base import UpstreamError

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as requests run

# A Wednesday in the gateway's zone (UTC in tests).
WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


def budget_key(account, group, *, budget: str, period: str):
    """An API key with a budget, and the credential authentication hands on for it."""
    api_key, secret = api_key_create(
        account=account, group=group, limits=ApiKeyLimitsInput(budget=budget, budget_period=period)
    )
    return api_key, credential_verify(secret=secret)


def key_budget_of(api_key) -> KeyBudget:
    return KeyBudget(api_key_id=api_key.pk, budget=api_key.budget, period=api_key.budget_period)


def window_used(api_key) -> dict[tuple[str, date], Decimal]:
    return {
        (row.window, row.window_start): row.used for row in KeyBudgetUsage.objects.filter(api_key=api_key)
    }


def wallet_of(account) -> Wallet:
    return Wallet.objects.get(account=account)


def test_a_call_counts_its_price_in_the_keys_window_and_its_hold_names_the_window(
    alice, alpha_group, alpha_model
):
    api_key, credential = budget_key(alice, alpha_group, budget="1.00", period="monthly")

    alpha_call(credential, alpha_group, FakeUpstream(), now=WEDNESDAY_NOON)

    assert window_used(api_key) == {("month", date(2025, 1, 1)): ALPHA_PRICE}
    hold = Hold.objects.get()
    assert (hold.api_key_id, hold.key_window, hold.key_window_start) == (
        api_key.pk,
        "month",
        date(2025, 1, 1),
    )
    assert (hold.status, hold.captured_amount) == (Hold.Status.CAPTURED, ALPHA_PRICE)
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("10") - ALPHA_PRICE, 0)
    assert UsageRecord.objects.values_list("status", "amount").get() == (200, ALPHA_PRICE)
    window = api_key_budget_window_get(
        api_key_id=api_key.pk, budget=api_key.budget, budget_period="monthly", now=WEDNESDAY_NOON
    )
    assert (window.used, window.remaining) == (ALPHA_PRICE, Decimal("0.85"))
    assert ledger_check() == []


def test_a_key_without_a_budget_counts_nothing_and_its_hold_names_no_window(alice, alpha_group, alpha_model):
    _, secret = api_key_create(account=alice, group=alpha_group)

    alpha_call(credential_verify(secret=secret), alpha_group, FakeUpstream())

    assert not KeyBudgetUsage.objects.exists()
    hold = Hold.objects.get()
    assert (hold.api_key_id, hold.key_window, hold.key_window_start) == (None, "", None)
    assert hold.status == Hold.Status.CAPTURED


def test_it_refuses_a_call_over_the_budget_with_retry_after_until_the_window_ends(
    alice, alpha_group, alpha_model
):
    api_key, credential = budget_key(alice, alpha_group, budget="0.30", period="monthly")
    for n in range(2):
        alpha_call(credential, alpha_group, FakeUpstream(), request_id=f"r{n}", now=WEDNESDAY_NOON)
    upstream = FakeUpstream()

    with pytest.raises(UsageLimitExceeded) as refused:
        alpha_call(credential, alpha_group, upstream, request_id="r2", now=WEDNESDAY_NOON)

    answered = api_error_for(refused.value)
    assert (answered.status, answered.type, answered.code) == (
        429,
        "rate_limit_error",
        "USAGE_LIMIT_EXCEEDED",
    )
    assert refused.value.message == (
        "Usage limit exceeded: this call (¥0.15) would go over this API key's monthly budget of ¥0.30 "
        "(¥0.30 used, resets at 2025-02-01T00:00:00+00:00)."
    )
    # Wednesday January 15 at noon to February 1 at midnight: 16 days and 12 hours.
    assert answered.headers["Retry-After"] == str((16 * 24 + 12) * 3600)
    assert upstream.calls == 0
    # Nothing reserved for the refused call: no hold, nothing held, the window as it was.
    assert not Hold.objects.filter(reference="r2").exists()
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("9.70"), 0)
    assert window_used(api_key) == {("month", date(2025, 1, 1)): Decimal("0.30")}
    assert UsageRecord.objects.filter(request_id="r2").values_list("status", "error_code").get() == (
        429,
        "USAGE_LIMIT_EXCEEDED",
    )
    assert ledger_check() == []


def test_the_precheck_refuses_what_the_window_has_no_room_for_and_counts_nothing(
    alice, alpha_group, alpha_model
):
    api_key, credential = budget_key(alice, alpha_group, budget="0.30", period="monthly")
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r0", now=WEDNESDAY_NOON)
    window = {("month", date(2025, 1, 1)): Decimal("0.15")}

    key_budget_precheck(key_budget=key_budget_of(api_key), amount=Decimal("0.15"), now=WEDNESDAY_NOON)
    with pytest.raises(UsageLimitExceeded) as refused:
        key_budget_precheck(key_budget=key_budget_of(api_key), amount=Decimal("0.16"), now=WEDNESDAY_NOON)

    assert refused.value.message == (
        "Usage limit exceeded: this call (¥0.16) would go over this API key's monthly budget of ¥0.30 "
        "(¥0.15 used, resets at 2025-02-01T00:00:00+00:00)."
    )
    assert window_used(api_key) == window
    # The next window is empty: the same amount fits there.
    key_budget_precheck(
        key_budget=key_budget_of(api_key), amount=Decimal("0.30"), now=datetime(2025, 2, 1, tzinfo=UTC)
    )
    assert window_used(api_key) == window


def test_a_call_costing_more_than_the_whole_budget_is_refused_without_hope_of_a_reset(
    alice, alpha_group, alpha_model
):
    _, credential = budget_key(alice, alpha_group, budget="0.10", period="daily")

    with pytest.raises(UsageLimitExceeded) as refused:
        alpha_call(credential, alpha_group, FakeUpstream(), now=WEDNESDAY_NOON)

    assert refused.value.message == (
        "Usage limit exceeded: this call (¥0.15) costs more than this API key's daily budget of ¥0.10."
    )
    answer = error_response(api_error_for(refused.value), request=None)
    # Waiting cannot help: no Retry-After, and the official SDKs are told not to retry.
    assert "Retry-After" not in answer and answer["x-should-retry"] == "false"
    assert not KeyBudgetUsage.objects.filter(used__gt=0).exists()
    assert not Hold.objects.exists() and wallet_of(alice).held == 0


def test_insufficient_balance_refuses_before_the_key_window_counts_anything(bob, alpha_group, alpha_model):
    api_key, credential = budget_key(bob, alpha_group, budget="1.00", period="monthly")

    with pytest.raises(InsufficientBalance):
        alpha_call(credential, alpha_group, FakeUpstream(), now=WEDNESDAY_NOON)

    assert not KeyBudgetUsage.objects.filter(api_key=api_key, used__gt=0).exists()
    assert not Hold.objects.exists()


def test_a_failed_upstream_call_leaves_the_window_unchanged_and_charges_nothing(
    alice, alpha_group, alpha_model
):
    api_key, credential = budget_key(alice, alpha_group, budget="0.15", period="daily")

    with pytest.raises(UpstreamError):
        alpha_call(credential, alpha_group, FakeUpstream(fail=True), now=WEDNESDAY_NOON)

    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): Decimal("0")}
    assert Hold.objects.get().status == Hold.Status.RELEASED
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("10"), 0)
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    # The whole budget is there again for the next call.
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r2", now=WEDNESDAY_NOON)
    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): ALPHA_PRICE}
    assert ledger_check() == []


def test_a_capture_for_less_gives_the_difference_back_to_the_window(alice, alpha_group):
    api_key, _ = budget_key(alice, alpha_group, budget="1.00", period="weekly")
    hold = hold_reserve(
        account_id=alice.pk,
        amount=Decimal("0.40"),
        reference="req_1",
        now=WEDNESDAY_NOON,
        key_budget=key_budget_of(api_key),
    )
    assert window_used(api_key) == {("week", date(2025, 1, 13)): Decimal("0.40")}

    assert hold_capture(hold=hold, amount=Decimal("0.0123")) is True

    assert window_used(api_key) == {("week", date(2025, 1, 13)): Decimal("0.0123")}
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("9.9877"), 0)
    # Resolved once: a release after the capture gives nothing more back.
    assert hold_release(hold=hold) is False
    assert window_used(api_key) == {("week", date(2025, 1, 13)): Decimal("0.0123")}
    assert ledger_check() == []


def test_a_text_call_reserves_its_ceiling_and_keeps_only_its_cost_in_the_window(
    alice, alpha_group, alpha_model
):
    api_key, credential = budget_key(alice, alpha_group, budget="0.50", period="total")
    ceiling, cost = Decimal("0.30"), Decimal("0.00036")
    seen_in_flight = []

    def call():
        seen_in_flight.append(window_used(api_key))
        return "answer"

    with usage_scope(request_id="req_text", endpoint="chat.completions", credential=credential) as usage:
        metered_call(
            usage=usage,
            credential=credential,
            group=alpha_group,
            model_id="alpha-image-2",
            price=ceiling,
            call=call,
            charge=lambda _: cost,
        )

    total_start = date(1970, 1, 1)
    assert seen_in_flight == [{("total", total_start): ceiling}]
    assert window_used(api_key) == {("total", total_start): cost}
    assert wallet_of(alice).balance == Decimal("10") - cost
    assert UsageRecord.objects.values_list("amount", flat=True).get() == cost
    assert ledger_check() == []


def test_a_stale_holds_expiry_gives_back_and_a_late_capture_charges_nothing(alice, alpha_group):
    api_key, _ = budget_key(alice, alpha_group, budget="1.00", period="monthly")
    now = timezone.now()
    hold = hold_reserve(
        account_id=alice.pk,
        amount=Decimal("0.50"),
        reference="req_1",
        now=now,
        ttl_seconds=60,
        key_budget=key_budget_of(api_key),
    )

    assert holds_release_stale(now=now + timedelta(seconds=61)) == 1

    assert set(window_used(api_key).values()) == {Decimal("0")}
    assert Hold.objects.get().status == Hold.Status.EXPIRED
    assert hold_capture(hold=hold) is False
    assert set(window_used(api_key).values()) == {Decimal("0")}
    assert wallet_of(alice).balance == Decimal("10")
    assert ledger_check() == []


def test_a_dead_workers_holds_give_their_key_window_back(alice, alpha_group):
    api_key, _ = budget_key(alice, alpha_group, budget="1.00", period="daily")
    key_budget = key_budget_of(api_key)
    for n in range(3):
        hold_reserve(
            account_id=alice.pk,
            amount=Decimal("0.20"),
            reference=f"req_{n}",
            now=WEDNESDAY_NOON,
            key_budget=key_budget,
        )
    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): Decimal("0.60")}

    assert holds_release_owner(owner=process_owner(), now=WEDNESDAY_NOON) == 3
    assert holds_release_owner(owner=process_owner(), now=WEDNESDAY_NOON) == 0

    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): Decimal("0")}
    assert wallet_of(alice).held == 0
    assert ledger_check() == []


def test_a_hold_released_after_midnight_gives_back_to_its_own_day(alice, alpha_group, alpha_model):
    api_key, credential = budget_key(alice, alpha_group, budget="0.15", period="daily")
    hold = hold_reserve(
        account_id=alice.pk,
        amount=ALPHA_PRICE,
        reference="req_old",
        now=WEDNESDAY_NOON,
        key_budget=key_budget_of(api_key),
    )
    thursday = WEDNESDAY_NOON + timedelta(days=1)
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="req_new", now=thursday)

    assert hold_release(hold=hold) is True

    assert window_used(api_key) == {
        ("day", WEDNESDAY_NOON.date()): Decimal("0"),
        ("day", thursday.date()): ALPHA_PRICE,
    }
    assert ledger_check() == []


# --- windows roll over at midnight in GATEWAY_TIMEZONE ----------------------------------------------


@pytest.mark.parametrize(
    ("period", "last_moment", "retry_after", "next_window"),
    [
        # Shanghai is UTC+8: its day ends at 16:00 UTC.
        ("daily", datetime(2025, 1, 15, 15, 30, tzinfo=UTC), 1800, datetime(2025, 1, 15, 16, 0, tzinfo=UTC)),
        # Sunday 23:00 in Shanghai; the week starts on Monday.
        ("weekly", datetime(2025, 1, 19, 15, 0, tzinfo=UTC), 3600, datetime(2025, 1, 19, 16, 0, tzinfo=UTC)),
        # January 31 at 23:59 in Shanghai; the month starts on the 1st.
        ("monthly", datetime(2025, 1, 31, 15, 59, tzinfo=UTC), 60, datetime(2025, 1, 31, 16, 0, tzinfo=UTC)),
    ],
)
def test_a_window_rolls_over_at_local_midnight(
    alice, alpha_group, alpha_model, settings, period, last_moment, retry_after, next_window
):
    settings.GATEWAY_TIMEZONE = "Asia/Shanghai"
    api_key, credential = budget_key(alice, alpha_group, budget="0.15", period=period)
    # Early in the window (Wednesday 00:30 local; January 1 for the month).
    first = (
        datetime(2025, 1, 14, 16, 30, tzinfo=UTC) if period != "monthly" else datetime(2025, 1, 1, tzinfo=UTC)
    )
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r1", now=first)

    with pytest.raises(UsageLimitExceeded) as refused:
        alpha_call(credential, alpha_group, FakeUpstream(), request_id="r2", now=last_moment)
    assert api_error_for(refused.value).headers["Retry-After"] == str(retry_after)
    assert f"resets at {next_window.astimezone(window_zone()).isoformat()}" in refused.value.message

    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r3", now=next_window)
    assert sorted(window_used(api_key).values()) == [ALPHA_PRICE, ALPHA_PRICE]
    assert ledger_check() == []


def test_the_total_budget_never_resets(alice, alpha_group, alpha_model):
    api_key, credential = budget_key(alice, alpha_group, budget="0.30", period="total")
    alpha_call(credential, alpha_group, FakeUpstream(), request_id="r1", now=WEDNESDAY_NOON)
    alpha_call(
        credential, alpha_group, FakeUpstream(), request_id="r2", now=WEDNESDAY_NOON + timedelta(days=40)
    )

    with pytest.raises(UsageLimitExceeded) as refused:
        alpha_call(
            credential, alpha_group, FakeUpstream(), request_id="r3", now=WEDNESDAY_NOON + timedelta(days=400)
        )

    assert "total budget of ¥0.30 (¥0.30 used, never resets)" in refused.value.message
    answer = error_response(api_error_for(refused.value), request=None)
    # Waiting cannot help: no Retry-After, and the official SDKs are told not to retry.
    assert "Retry-After" not in answer and answer["x-should-retry"] == "false"
    assert window_used(api_key) == {("total", date(1970, 1, 1)): Decimal("0.30")}


# --- a subscription-billed group with a key budget --------------------------------------------------


@pytest.fixture
def carol_key(carol, beta_group, beta_model):
    """Carol's key of the subscription group, with a budget of two calls a day."""
    return budget_key(carol, beta_group, budget="0.04", period="daily")


def sub_used(subscription) -> dict[str, Decimal]:
    return dict(SubscriptionUsage.objects.filter(subscription=subscription).values_list("window", "used"))


def test_a_subscription_call_counts_in_the_caps_and_the_key_window_together(carol, beta_group, carol_key):
    api_key, credential = carol_key
    subscription = subscribe(carol, beta_group, daily="1")

    beta_call(credential, beta_group, FakeUpstream(), now=WEDNESDAY_NOON)

    assert sub_used(subscription) == {w: BETA_PRICE for w in ("day", "week", "month", "total")}
    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): BETA_PRICE}
    hold = Hold.objects.get()
    assert (hold.kind, hold.api_key_id, hold.key_window) == (Hold.Kind.SUBSCRIPTION, api_key.pk, "day")
    assert wallet_of(carol).balance == 0
    assert ledger_check() == []


def test_the_key_budget_refusing_leaves_the_subscription_untouched(carol, beta_group, carol_key):
    api_key, credential = carol_key
    subscription = subscribe(carol, beta_group, daily="1")
    for n in range(2):
        beta_call(credential, beta_group, FakeUpstream(), request_id=f"r{n}", now=WEDNESDAY_NOON)

    with pytest.raises(UsageLimitExceeded) as refused:
        beta_call(credential, beta_group, FakeUpstream(), request_id="r2", now=WEDNESDAY_NOON)

    assert "this API key's daily budget of ¥0.04" in refused.value.message
    assert api_error_for(refused.value).headers["Retry-After"] == str(12 * 3600)
    assert sub_used(subscription) == {w: Decimal("0.04") for w in ("day", "week", "month", "total")}
    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): Decimal("0.04")}
    assert not Hold.objects.filter(reference="r2").exists()
    assert ledger_check() == []


def test_a_subscription_cap_refusing_leaves_the_key_window_untouched(carol, beta_group, carol_key):
    api_key, credential = carol_key
    subscription = subscribe(carol, beta_group, daily="1", weekly="0.02")
    beta_call(credential, beta_group, FakeUpstream(), request_id="r1", now=WEDNESDAY_NOON)

    with pytest.raises(UsageLimitExceeded) as refused:
        beta_call(credential, beta_group, FakeUpstream(), request_id="r2", now=WEDNESDAY_NOON)

    assert "weekly cap" in refused.value.message and "API key" not in refused.value.message
    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): BETA_PRICE}
    assert sub_used(subscription)["day"] == BETA_PRICE
    assert ledger_check() == []


def test_a_subscription_hold_gives_back_to_the_caps_and_the_key_window(carol, beta_group, carol_key):
    api_key, _ = carol_key
    subscription = subscribe(carol, beta_group, daily="1")
    key_budget = key_budget_of(api_key)
    captured = subscription_hold_reserve(
        subscription=subscription,
        amount=Decimal("0.03"),
        reference="r1",
        now=WEDNESDAY_NOON,
        key_budget=key_budget,
    )
    released = subscription_hold_reserve(
        subscription=subscription,
        amount=Decimal("0.01"),
        reference="r2",
        now=WEDNESDAY_NOON,
        key_budget=key_budget,
    )
    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): Decimal("0.04")}

    assert hold_capture(hold=captured, amount=Decimal("0.005")) is True
    assert hold_release(hold=released) is True
    assert hold_release(hold=released) is False

    assert window_used(api_key) == {("day", WEDNESDAY_NOON.date()): Decimal("0.005")}
    assert sub_used(subscription) == {w: Decimal("0.005") for w in ("day", "week", "month", "total")}
    assert ledger_check() == []


# --- what it costs on PostgreSQL ---------------------------------------------------------------------


def test_a_keyed_reservation_is_one_statement_in_one_transaction_and_resolving_it_one_more(
    alice, alpha_group
):
    api_key, _ = budget_key(alice, alpha_group, budget="1.00", period="monthly")
    key_budget = key_budget_of(api_key)
    with statements_sent() as sent:
        captured = hold_reserve(
            account_id=alice.pk, amount=Decimal("0.40"), reference="r1", key_budget=key_budget
        )
    # One statement; the transaction around it (BEGIN, COMMIT) rolls back a wallet reservation the
    # key's window then refused.
    assert_sent_on_postgresql(sent, [True])
    released = hold_reserve(
        account_id=alice.pk, amount=Decimal("0.40"), reference="r2", key_budget=key_budget
    )
    with statements_sent() as sent:
        assert hold_capture(hold=captured, amount=Decimal("0.10")) is True
    assert_sent_on_postgresql(sent, [False])
    with statements_sent() as sent:
        assert hold_release(hold=released) is True
    assert_sent_on_postgresql(sent, [False])
    assert set(window_used(api_key).values()) == {Decimal("0.10")}
    assert (wallet_of(alice).balance, wallet_of(alice).held) == (Decimal("9.90"), 0)
    with statements_sent() as sent, pytest.raises(UsageLimitExceeded):
        hold_reserve(account_id=alice.pk, amount=Decimal("0.95"), reference="r3", key_budget=key_budget)
    # The statement in its transaction, rolled back, then the refusal's read of the window.
    assert_sent_on_postgresql(sent, [True, False])
    assert wallet_of(alice).held == 0  # the wallet's part was rolled back with the refusal
    assert ledger_check() == []
