"""A call waiting on its upstream holds no database connection (the pool lends one only while the call
talks to PostgreSQL), so calls in flight are not capped by the pool's size (docs/benchmarks.md)."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.db import DataError, connection

from billing.holds import hold_capture, hold_reserve
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.statements import hold_reserve_sql, statement_run
from keys.services import api_key_create
from tests.factories import image_model_make
from tests.images.conftest import OPENAI_BASE, image_bytes
from tests.markers import POOLED_POSTGRES

pytestmark = [
    *POOLED_POSTGRES,
    pytest.mark.django_db(transaction=True),  # the connection can only be given back outside a transaction
]


def _generate(client, *, key: str, model: str):
    return client.post(
        "/v1/images/generations",
        data=json.dumps({"model": model, "prompt": "a fox", "response_format": "b64_json"}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def test_an_api_call_holds_no_database_connection_during_its_upstream_call(
    client, alice, alpha_group, openai_upstream, mocked
):
    cache.clear()  # circuit state and counters of earlier tests (ids are reused across flushed tests)
    image_model_make(model_id="alpha-pooled", group=alpha_group, upstreams=[openai_upstream], price="0.15")
    key = api_key_create(account=alice, group=alpha_group)[1]
    held_during_call = []

    def upstream(request):
        # Runs in the request's thread, at the moment the gateway waits on the upstream.
        held_during_call.append(connection.connection is not None)
        image = base64.b64encode(image_bytes()).decode()
        return 200, {}, json.dumps({"created": 1, "data": [{"b64_json": image}]})

    mocked.add_callback(
        "POST", f"{OPENAI_BASE}/images/generations", callback=upstream, content_type="application/json"
    )
    balance = Wallet.objects.get(account=alice).balance

    response = _generate(client, key=key, model="alpha-pooled")

    assert response.status_code == 200, response.content
    assert held_during_call == [False]
    # And the call was still reserved before and charged after, once.
    assert Wallet.objects.get(account=alice).balance == balance - Decimal("0.15")
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert UsageRecord.objects.get().amount == Decimal("0.15")


def test_the_billing_statements_borrow_a_pooled_connection_and_commit_on_it(alice):
    """Outside a transaction, reserve and capture each borrow a connection from the pool for their one
    statement; the thread's Django connection stays closed, and what they wrote is committed even on a
    pooled connection Django itself never used (psycopg opens those outside autocommit)."""
    pool = connection.pool
    pool.open()
    borrowed = [pool.getconn() for _ in range(pool.get_stats()["pool_available"])]
    for raw in borrowed:
        raw.autocommit = False
    for raw in borrowed:
        pool.putconn(raw)
    connection.close()

    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.25"), reference="req_pooled")
    assert connection.connection is None
    assert hold_capture(hold=hold) is True
    assert connection.connection is None

    # Read back on other connections: both statements committed.
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.CAPTURED
    assert Wallet.objects.get(account=alice).balance == Decimal("9.75")
    assert LedgerEntry.objects.get(kind="charge").amount == Decimal("-0.25")


def test_a_failing_billing_statement_raises_djangos_error_and_returns_its_connection():
    connection.close()
    available = connection.pool.get_stats().get("pool_available")

    with pytest.raises(DataError):
        statement_run("SELECT 1 / %(zero)s", {"zero": 0})

    assert connection.connection is None
    assert connection.pool.get_stats().get("pool_available") == available


def test_a_statement_on_a_borrowed_connection_is_wrapped_and_logged_like_any_query(alice):
    connection.close()
    wrapped = []

    def record(execute, sql, params, many, context):
        wrapped.append(sql)
        return execute(sql, params, many, context)

    connection.force_debug_cursor = True  # as DEBUG or CaptureQueriesContext log queries
    connection.queries_log.clear()
    try:
        with connection.execute_wrapper(record):
            hold_reserve(account_id=alice.pk, amount=Decimal("0.25"), reference="req_logged")
    finally:
        connection.force_debug_cursor = False
    assert connection.connection is None  # it ran on a connection borrowed for it alone
    assert len(wrapped) == 1 and "billing_hold" in wrapped[0]
    (logged,) = connection.queries_log  # as sent: with PostgreSQL's $n placeholders
    assert "billing_hold" in logged["sql"]


def test_a_pooled_connection_keeps_a_statements_cursor_for_its_next_run(alice):
    connection.ensure_connection()  # the statements run on the thread's own (pooled) connection
    raw = connection.connection
    hold_reserve(account_id=alice.pk, amount=Decimal("0.25"), reference="req_kept_1")
    sql = hold_reserve_sql(own_transaction=True)  # outside a transaction, the reserve's own
    cursor = raw.statement_cursors[sql]

    hold_reserve(account_id=alice.pk, amount=Decimal("0.25"), reference="req_kept_2")

    assert raw.statement_cursors[sql] is cursor and not cursor.closed
    assert Hold.objects.filter(reference__in=["req_kept_1", "req_kept_2"]).count() == 2
    assert Wallet.objects.get(account=alice).held == Decimal("0.50")


def test_a_kept_cursor_runs_its_statement_again_after_the_statement_failed():
    connection.ensure_connection()
    raw = connection.connection
    with pytest.raises(DataError):
        statement_run("SELECT 1 / %(divisor)s", {"divisor": 0})
    cursor = raw.statement_cursors["SELECT 1 / %(divisor)s"]
    assert statement_run("SELECT 1 / %(divisor)s", {"divisor": 1}) == (1,)
    assert raw.statement_cursors["SELECT 1 / %(divisor)s"] is cursor
