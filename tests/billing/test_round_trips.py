"""Round trips of the billing hot path: on PostgreSQL reserve is one statement, capture and the usage
record are one statement, each in autocommit (its own transaction: no BEGIN or COMMIT round trip, no
row lock held across a client round trip). The same cases run on SQLite, where the ORM form of each
operation must give the same results; only the statements sent differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import connection

from billing.errors import InsufficientBalance
from billing.holds import hold_capture, hold_reserve
from billing.models import Hold, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.selectors import ledger_check
from billing.subscriptions import subscription_hold_reserve
from tests.billing.conftest import (
    FakeUpstream,
    alpha_call,
    credential_for,
    postgres_only,
    subscribe,
    usage_record_draft,
)
from tests.gunicorn_server import shared_database_url

pytestmark = [pytest.mark.django_db(transaction=True)]  # no test transaction: autocommit, as requests run

ON_POSTGRES = connection.vendor == "postgresql"

PRICE = Decimal("0.15")
WEDNESDAY_NOON = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Statement:
    sql: str
    in_transaction: bool  # False: autocommit, the statement is its own transaction (one round trip)


@contextmanager
def statements_sent() -> Iterator[list[Statement]]:
    """Every statement sent on this thread's connection meanwhile, and whether a transaction was open
    around it (then BEGIN and COMMIT are round trips of their own)."""
    connection.ensure_connection()  # connecting runs statements of its own; not the subject here
    sent: list[Statement] = []

    def record(execute, sql, params, many, context):
        sent.append(Statement(sql=sql, in_transaction=not connection.get_autocommit()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield sent


def assert_sent_on_postgresql(sent: list[Statement], in_transaction: list[bool]) -> None:
    """On PostgreSQL, exactly these statements were sent (one per operation; True: inside a
    transaction). The ORM form (SQLite) sends several per operation: there the results are the test."""
    if ON_POSTGRES:
        assert [s.in_transaction for s in sent] == in_transaction
    else:
        assert sent


def build_record(account, credential, *, request_id="req_1", group=None):
    return usage_record_draft(
        account,
        request_id=request_id,
        credential=credential.limit_key,
        group_id=group.pk if group else None,
        latency_ms=12,
    )


def test_it_reserves_a_wallet_hold_in_one_statement_outside_any_transaction(alice):
    with statements_sent() as sent:
        hold = hold_reserve(account_id=alice.pk, amount=PRICE, reference="req_1")
    assert_sent_on_postgresql(sent, [False])
    stored = Hold.objects.get()
    assert (hold.pk, hold.wallet_id, hold.kind, hold.status, hold.amount, hold.reference) == (
        stored.pk,
        stored.wallet_id,
        stored.kind,
        stored.status,
        stored.amount,
        stored.reference,
    )
    assert (hold.created_at, hold.expires_at) == (stored.created_at, stored.expires_at)
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.pk, wallet.balance, wallet.held) == (hold.wallet_id, Decimal("10"), PRICE)


def test_it_refuses_insufficient_balance_in_one_statement_that_writes_nothing(alice):
    hold_reserve(account_id=alice.pk, amount=Decimal("9.90"), reference="req_1")
    with statements_sent() as sent, pytest.raises(InsufficientBalance) as refused:
        hold_reserve(account_id=alice.pk, amount=PRICE, reference="req_2")
    assert refused.value.code == "INSUFFICIENT_BALANCE"
    assert_sent_on_postgresql(sent, [False])
    assert Wallet.objects.get(account=alice).held == Decimal("9.90")
    assert not Hold.objects.filter(reference="req_2").exists()


def test_it_captures_and_records_a_call_in_one_statement_outside_any_transaction(alice):
    hold = hold_reserve(account_id=alice.pk, amount=PRICE, reference="req_1")
    record = build_record(alice, credential_for(alice))
    with statements_sent() as sent:
        assert hold_capture(hold=hold, usage_record=record) is True
    assert_sent_on_postgresql(sent, [False])
    assert Hold.objects.get().status == Hold.Status.CAPTURED
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("9.85"), Decimal("0"))
    charge = LedgerEntry.objects.get(kind="charge")
    assert (charge.amount, charge.balance_after, charge.reference) == (-PRICE, Decimal("9.85"), "req_1")
    stored = UsageRecord.objects.get()
    assert (record.pk, record.amount) == (stored.pk, PRICE)
    assert (stored.status, stored.amount, stored.upstream, stored.latency_ms) == (200, PRICE, "demo", 12)
    assert ledger_check() == []


def test_a_successful_wallet_billed_call_costs_two_statements_reserve_and_capture(
    alice, alpha_group, alpha_model
):
    credential = credential_for(alice)
    with statements_sent() as sent:
        alpha_call(credential, alpha_group, FakeUpstream())
    if ON_POSTGRES:
        # The account's alert thresholds (notifications/thresholds.py), read on the process's first
        # call for the account and then cached (every call without the shared cache): none here, so
        # nothing else is added (tests/notifications/test_alerts.py counts the cached case).
        assert "notifications_alertsettings" in sent.pop(1).sql
    assert_sent_on_postgresql(sent, [False, False])
    if ON_POSTGRES:
        assert "billing_hold" in sent[0].sql and "billing_usagerecord" in sent[1].sql
    record = UsageRecord.objects.get()
    assert (record.status, record.amount, record.request_id) == (200, PRICE, "req_1")
    assert LedgerEntry.objects.filter(kind="charge").count() == 1


def test_a_failed_wallet_billed_call_releases_in_one_statement_and_records_it_once(
    alice, alpha_group, alpha_model
):
    credential = credential_for(alice)
    with statements_sent() as sent, pytest.raises(Exception, match="overloaded"):
        alpha_call(credential, alpha_group, FakeUpstream(fail=True))
    # Reserve, release, usage record: each one statement in autocommit.
    assert_sent_on_postgresql(sent, [False, False, False])
    assert UsageRecord.objects.values_list("status", "amount").get() == (503, Decimal("0"))
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("10"), Decimal("0"))
    assert Hold.objects.get().status == Hold.Status.RELEASED


def test_it_reserves_a_subscription_call_in_one_statement_in_one_transaction(carol, beta_group):
    subscription = subscribe(carol, beta_group, daily="1", weekly="2", monthly="3", total="4")
    with statements_sent() as sent:
        hold = subscription_hold_reserve(
            subscription=subscription, amount=Decimal("0.02"), reference="req_1", now=WEDNESDAY_NOON
        )
    # One statement; the transaction around it (BEGIN, COMMIT) rolls back a partly counted call.
    assert_sent_on_postgresql(sent, [True])
    used = dict(SubscriptionUsage.objects.values_list("window", "used"))
    assert used == {w: Decimal("0.02") for w in ("day", "week", "month", "total")}
    stored = Hold.objects.get()
    assert (hold.pk, hold.subscription_id, hold.day_start, hold.week_start, hold.month_start) == (
        stored.pk,
        subscription.pk,
        stored.day_start,
        stored.week_start,
        stored.month_start,
    )
    record = build_record(carol, credential_for(carol), group=beta_group)
    with statements_sent() as sent:
        assert hold_capture(hold=hold, usage_record=record) is True
    assert_sent_on_postgresql(sent, [False])
    assert UsageRecord.objects.values_list("amount", flat=True).get() == Decimal("0.02")
    assert ledger_check() == []


# A gateway process on the test database: reserves and captures three calls of the account on its
# own connection (as a worker does), then prints what PostgreSQL holds prepared on that connection.
GATEWAY_PROCESS = """
import json, os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "gateway_project.settings_test"
import django
django.setup()
from decimal import Decimal
from django.db import connection
from billing.holds import hold_capture, hold_reserve

account_id = int(sys.argv[1])
connection.ensure_connection()  # the statements run on this connection, which is then read back
for index in range(3):
    hold = hold_reserve(account_id=account_id, amount=Decimal("0.15"), reference=f"req_{index}")
    assert hold_capture(hold=hold)
with connection.cursor() as cursor:
    cursor.execute("SELECT statement FROM pg_prepared_statements")
    print(json.dumps([row[0] for row in cursor.fetchall()]))
"""


def prepared_by_a_gateway_process(account, **env: str) -> list[str]:
    environment = {**os.environ, "DATABASE_URL": shared_database_url(), "GATEWAY_ENV_FILE": "", **env}
    result = subprocess.run(
        [sys.executable, "-c", GATEWAY_PROCESS, str(account.pk)],
        cwd=settings.BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.postgres
@postgres_only
def test_the_hot_statements_are_prepared_once_per_connection(alice):
    prepared = prepared_by_a_gateway_process(alice)

    # Each hot statement prepared once, however many calls ran; Django's own queries never.
    assert len([sql for sql in prepared if sql.lstrip().startswith("WITH no_flush_wait")]) == 1
    assert len([sql for sql in prepared if sql.lstrip().startswith("WITH captured")]) == 1
    assert len(prepared) == 2
    wallet = Wallet.objects.get(account=alice)
    assert wallet.held == 0 and wallet.balance == Decimal("10") - 3 * PRICE
    assert ledger_check() == []


@pytest.mark.postgres
@postgres_only
def test_it_can_run_without_prepared_statements(alice):
    prepared = prepared_by_a_gateway_process(alice, DATABASE_PREPARED_STATEMENTS="0")

    assert prepared == []
    assert Wallet.objects.get(account=alice).balance == Decimal("10") - 3 * PRICE
    assert LedgerEntry.objects.filter(kind="charge").count() == 3
