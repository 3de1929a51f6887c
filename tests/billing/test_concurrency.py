"""Exactness under real concurrency: PostgreSQL, real threads, one connection each."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from api.answers import StoredResponse
from api.errors import api_error_for
from api.idempotency import idempotent_answer
from api.metering import metered_call
from api.usage import usage_scope
from billing.errors import (
    ConcurrencyLimitExceeded,
    IdempotencyKeyInUse,
    InsufficientBalance,
    UsageLimitExceeded,
)
from billing.holds import hold_capture, hold_reserve, holds_release_stale
from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.selectors import ledger_check
from groups.models import Group
from tests.billing.conftest import (
    BETA_PRICE,
    FakeUpstream,
    alpha_call,
    beta_call,
    credential_for,
    postgres_only,
    run_concurrently,
    subscribe,
)
from tests.ledger import wallet_ledger_sum
from upstreams.providers.base import UpstreamError

pytestmark = [pytest.mark.postgres, postgres_only, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("0.15")
WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


def slow_upstream(inner: FakeUpstream, seconds: float = 0.01):
    """Keeps each call in flight a moment, so the calls overlap."""

    def call():
        time.sleep(seconds)
        return inner()

    return call


def errors_of(outcomes, kind):
    return [value for status, value in outcomes if status == "error" and isinstance(value, kind)]


def test_balance_for_k_calls_serves_exactly_k_of_5k_concurrent_calls(bob, alpha_group, alpha_model):
    k = 10
    wallet_top_up(account=bob, amount=PRICE * k, reference="test")
    credential = credential_for(bob)
    upstream = FakeUpstream()
    lowest_available = []
    stop = threading.Event()

    def watch():
        # Samples the wallet while the calls run: available balance must never go below zero.
        try:
            while not stop.is_set():
                wallet = Wallet.objects.get(account=bob)
                lowest_available.append(wallet.balance - wallet.held)
        finally:
            connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        outcomes = run_concurrently(
            lambda i: alpha_call(credential, alpha_group, slow_upstream(upstream), request_id=f"r{i}"),
            5 * k,
        )
    finally:
        stop.set()
        watcher.join()
    successes = [value for status, value in outcomes if status == "ok"]
    refused = errors_of(outcomes, InsufficientBalance)
    assert len(successes) == k
    assert len(refused) == 4 * k
    assert {e.code for e in refused} == {"INSUFFICIENT_BALANCE"}
    assert upstream.calls == k  # the refused calls never reached the upstream
    wallet = Wallet.objects.get(account=bob)
    assert (wallet.balance, wallet.held) == (Decimal("0"), Decimal("0"))
    assert wallet_ledger_sum(wallet=wallet) == wallet.balance
    assert LedgerEntry.objects.filter(wallet=wallet, kind="charge").count() == k
    assert lowest_available and min(lowest_available) >= 0
    # One usage record per call: the served ones written with their charge, the refused ones by the scope.
    records = UsageRecord.objects.values_list("request_id", "status", "amount")
    assert sorted(r[0] for r in records) == sorted(f"r{i}" for i in range(5 * k))
    assert sorted((status, amount) for _, status, amount in records) == sorted(
        [(200, PRICE)] * k + [(403, Decimal("0"))] * (4 * k)
    )
    assert ledger_check() == []


def test_concurrent_captures_and_top_ups_chain_every_balance_after(alice, alpha_group, alpha_model):
    credential = credential_for(alice)
    upstream = FakeUpstream()

    def worker(i):
        if i % 4 == 0:
            return wallet_top_up(account=alice, amount="1", reference=f"t{i}")
        return alpha_call(credential, alpha_group, upstream, request_id=f"r{i}")

    outcomes = run_concurrently(worker, 48)
    assert [status for status, _ in outcomes] == ["ok"] * 48
    # In the ledger's order every entry's balance_after is the running sum: each charge computed its
    # balance under the wallet's row lock, from the committed balance.
    running = Decimal("0")
    for amount, balance_after in LedgerEntry.objects.order_by("pk").values_list("amount", "balance_after"):
        running += amount
        assert balance_after == running
    wallet = Wallet.objects.get(account=alice)
    assert wallet.balance == running == Decimal("10") + 12 - PRICE * 36
    assert wallet.held == 0
    assert UsageRecord.objects.filter(status=200, amount=PRICE).count() == 36
    assert ledger_check() == []


def test_an_upstream_failing_every_call_changes_no_balance_cap_or_counter(
    alice, carol, alpha_group, beta_group, beta_model, alpha_model
):
    Group.objects.filter(pk__in=[alpha_group.pk, beta_group.pk]).update(concurrency=20)
    alpha = Group.objects.get(pk=alpha_group.pk)
    beta = Group.objects.get(pk=beta_group.pk)
    subscription = subscribe(carol, beta, daily="1", total="1")
    alice_credential, carol_credential = credential_for(alice), credential_for(carol)
    upstream = FakeUpstream(fail=True)

    def worker(i):
        if i % 2:
            return alpha_call(alice_credential, alpha, slow_upstream(upstream), request_id=f"a{i}")
        return beta_call(
            carol_credential,
            beta,
            slow_upstream(upstream),
            request_id=f"c{i}",
            now=WEDNESDAY_NOON,
        )

    outcomes = run_concurrently(worker, 40)
    assert len(errors_of(outcomes, UpstreamError)) == 40
    assert upstream.calls == 40
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("10"), Decimal("0"))
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert set(
        SubscriptionUsage.objects.filter(subscription=subscription).values_list("used", flat=True)
    ) == {0}
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    # No concurrency slot leaked: 20 calls per credential (its whole limit) are in flight at once.
    gate = threading.Barrier(40, timeout=30)

    def gate_call():
        gate.wait()
        return "ok"

    def again(i):
        if i % 2:
            return alpha_call(alice_credential, alpha, gate_call, request_id=f"again-a{i}")
        return beta_call(
            carol_credential,
            beta,
            gate_call,
            request_id=f"again-c{i}",
            now=WEDNESDAY_NOON,
        )

    outcomes = run_concurrently(again, 40)
    assert [status for status, _ in outcomes] == ["ok"] * 40
    assert ledger_check() == []


def test_random_failures_charge_exactly_the_successes(alice, alpha_group, alpha_model):
    upstream = FakeUpstream(failure_rate=0.3, seed=20250115)
    credential = credential_for(alice)
    outcomes = run_concurrently(
        lambda i: alpha_call(credential, alpha_group, slow_upstream(upstream), request_id=f"r{i}"),
        60,
    )
    successes = sum(1 for status, _ in outcomes if status == "ok")
    assert 0 < successes < 60
    assert successes == upstream.successes
    assert len(errors_of(outcomes, UpstreamError)) == 60 - successes
    wallet = Wallet.objects.get(account=alice)
    assert wallet.balance == Decimal("10") - PRICE * successes
    assert LedgerEntry.objects.filter(kind="charge").count() == successes
    assert wallet.held == 0
    assert ledger_check() == []


def test_capture_racing_stale_release_resolves_every_hold_exactly_once(alice):
    start = datetime.now(tz=UTC)
    holds = [
        hold_reserve(account_id=alice.pk, amount=PRICE, reference=f"r{i}", now=start, ttl_seconds=60)
        for i in range(30)
    ]
    expiry_passed = start + timedelta(seconds=61)

    def worker(i):
        if i < 30:
            return hold_capture(hold=holds[i])
        return holds_release_stale(now=expiry_passed, batch_size=7)

    outcomes = run_concurrently(worker, 34)  # 30 late captures and 4 cron runs on "many machines"
    assert all(status == "ok" for status, _ in outcomes)
    captured = sum(1 for status, value in outcomes[:30] if value is True)
    released = sum(value for _, value in outcomes[30:])
    assert captured + released == 30
    assert Hold.objects.filter(status=Hold.Status.CAPTURED).count() == captured
    assert Hold.objects.filter(status=Hold.Status.EXPIRED).count() == released
    assert LedgerEntry.objects.filter(kind="charge").count() == captured
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("10") - PRICE * captured, Decimal("0"))
    assert ledger_check() == []


def test_a_daily_cap_admits_exactly_c_concurrent_calls_per_day_within_the_total(
    carol, beta_group, beta_model
):
    price = BETA_PRICE
    subscription = subscribe(carol, beta_group, daily=price * 5, total=price * 8)
    credential = credential_for(carol)
    upstream = FakeUpstream()

    def day(now, tag):
        outcomes = run_concurrently(
            lambda i: beta_call(
                credential,
                beta_group,
                slow_upstream(upstream),
                request_id=f"{tag}{i}",
                now=now,
            ),
            20,
        )
        refused = errors_of(outcomes, UsageLimitExceeded)
        assert {e.code for e in refused} <= {"USAGE_LIMIT_EXCEEDED"}
        return sum(1 for status, _ in outcomes if status == "ok"), refused

    served, refused = day(WEDNESDAY_NOON, "d1-")
    assert served == 5 and len(refused) == 15
    assert {api_error_for(e).headers["Retry-After"] for e in refused} == {str(12 * 3600)}
    # The next day (time moved, not slept): the daily window is fresh, but the total allows only 3 more.
    served, refused = day(WEDNESDAY_NOON + timedelta(days=1), "d2-")
    assert served == 3 and len(refused) == 17
    served, _ = day(WEDNESDAY_NOON + timedelta(days=2), "d3-")
    assert served == 0
    assert upstream.calls == 8
    total = SubscriptionUsage.objects.get(subscription=subscription, window="total")
    assert total.used == price * 8
    assert ledger_check() == []


def test_random_subscription_failures_count_exactly_the_successes_in_every_window(
    carol, beta_group, beta_model
):
    price = BETA_PRICE
    # Every window capped, so every reservation takes all four counter locks (day, week, month, total)
    # while releases of failed calls take them too: a wrong lock order would deadlock here.
    subscription = subscribe(carol, beta_group, daily=price * 25, weekly="1", monthly="1", total="1")
    credential = credential_for(carol)
    upstream = FakeUpstream(failure_rate=0.3, seed=7)
    outcomes = run_concurrently(
        lambda i: beta_call(
            credential,
            beta_group,
            slow_upstream(upstream),
            request_id=f"s{i}",
            now=WEDNESDAY_NOON,
        ),
        60,
    )
    served = sum(1 for status, _ in outcomes if status == "ok")
    failed = errors_of(outcomes, UpstreamError)
    refused = errors_of(outcomes, UsageLimitExceeded)
    assert served + len(failed) + len(refused) == 60
    assert served == upstream.successes <= 25
    assert {e.code for e in refused} <= {"USAGE_LIMIT_EXCEEDED"}
    used = dict(SubscriptionUsage.objects.filter(subscription=subscription).values_list("window", "used"))
    assert used == {w: price * served for w in ("day", "week", "month", "total")}
    assert Hold.objects.filter(status=Hold.Status.CAPTURED).count() == served
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert UsageRecord.objects.count() == 60
    assert UsageRecord.objects.filter(status=200, amount=price).count() == served
    assert ledger_check() == []


def test_twenty_concurrent_requests_with_one_key_make_one_call_and_one_charge(
    alice, alpha_group, alpha_model
):
    credential = credential_for(alice)
    upstream = FakeUpstream(result=b'{"created":1,"data":[{"b64_json":"aGk="}]}')
    conflicts = threading.Semaphore(0)
    produced = []

    def produce():
        produced.append(1)
        # Stay in flight until the other 19 have each been told 409 once, so that path is exercised.
        for _ in range(19):
            conflicts.acquire(timeout=10)
        with usage_scope(
            request_id="req_first", endpoint="images.generations", credential=credential
        ) as usage:
            body = metered_call(
                usage=usage,
                credential=credential,
                group=alpha_group,
                model_id="alpha-image-2",
                price=PRICE,
                call=upstream,
            )
        return StoredResponse(status=200, body=body, content_type="application/json", headers={})

    def client(i):
        # A client that retries a 409 (as the docs tell it to) until it has the response.
        seen_conflict = False
        for _ in range(200):
            try:
                return idempotent_answer(
                    account=alice, key="one-image-please", fingerprint="fp-1", produce=produce
                ), seen_conflict
            except IdempotencyKeyInUse as exc:
                assert exc.code == "idempotency_key_in_use"
                if not seen_conflict:
                    seen_conflict = True
                    conflicts.release()
                # A client's retry is a new request: the finished one gave its connection back (with a
                # pool of DATABASE_POOL_MAX_SIZE connections, 20 waiting clients must not hold 20).
                connection.close()
                time.sleep(0.02)
        raise AssertionError("never got the response")

    outcomes = run_concurrently(client, 20)
    assert [status for status, _ in outcomes] == ["ok"] * 20
    replies = [value[0] for _, value in outcomes]
    assert len(produced) == 1
    assert upstream.calls == 1
    assert sum(1 for _, value in outcomes if value[1]) == 19
    assert {(r.status, r.body, r.content_type) for r in replies} == {
        (200, upstream.result, "application/json")
    }
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("10") - PRICE


def test_the_concurrency_limit_admits_exactly_n_calls_in_flight(alice, alpha_group, alpha_model):
    Group.objects.filter(pk=alpha_group.pk).update(concurrency=3)
    group = Group.objects.get(pk=alpha_group.pk)
    credential = credential_for(alice)
    release = threading.Event()
    in_flight = []

    def call():
        in_flight.append(1)
        release.wait(timeout=30)
        return "ok"

    # Refused calls return at once; once 7 are refused, the 3 admitted ones may finish.
    refused_count = threading.Semaphore(0)

    def worker(i):
        try:
            return alpha_call(credential, group, call, request_id=f"r{i}")
        except ConcurrencyLimitExceeded:
            refused_count.release()
            raise

    def releaser():
        for _ in range(7):
            refused_count.acquire(timeout=30)
        release.set()

    threading.Thread(target=releaser).start()
    outcomes = run_concurrently(worker, 10)
    refused = errors_of(outcomes, ConcurrencyLimitExceeded)
    assert len(refused) == 7 and len(in_flight) == 3
    assert {e.code for e in refused} == {"concurrency_limit_exceeded"}
    assert all(api_error_for(e).headers["Retry-After"] == "1" for e in refused)
    assert Wallet.objects.get(account=alice).balance == Decimal("10") - PRICE * 3
