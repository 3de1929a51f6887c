"""A provisioning top-up whose worker is killed mid-call (docs/failure-modes.md, "A worker killed"):
gunicorn (one gevent worker) on the test database, the worker killed with SIGKILL while its top-up
waits to complete its Idempotency-Key, then the same request retried with the same key once the key's
lock has run out. The wallet must be credited exactly once.

The moment between the ledger entry and the key's completion is made to last with PostgreSQL alone:
a trigger on the idempotency table waits, before any UPDATE, for an advisory lock this test holds;
the worker is killed there and its database session ended before that UPDATE runs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
import requests
from django.db import connection
from django.utils import timezone

from billing.models import IdempotencyRecord, LedgerEntry, Wallet
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.gunicorn_server import gunicorn_serving, gunicorn_worker_pids, shared_database_url

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]

LOCK = 4646
TABLE = IdempotencyRecord._meta.db_table


@pytest.fixture
def staff_key(staff, alpha_group) -> str:
    account = staff.account
    account.allowed_groups.add(alpha_group)
    return api_key_create(account=account, group=alpha_group)[1]


@pytest.fixture
def completion_held():
    """While the block runs, every UPDATE of an idempotency record waits for this test's advisory
    lock; yields the connection holding it (its `release()` lets them through)."""
    holder = psycopg.connect(shared_database_url(), autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
    holder.execute(
        f"""CREATE FUNCTION igw_test_wait() RETURNS trigger AS $$
        BEGIN PERFORM pg_advisory_lock_shared({LOCK}); PERFORM pg_advisory_unlock_shared({LOCK});
        RETURN NEW; END $$ LANGUAGE plpgsql"""
    )
    holder.execute(
        f"CREATE TRIGGER igw_test_wait BEFORE UPDATE ON {TABLE} FOR EACH ROW EXECUTE FUNCTION igw_test_wait()"
    )
    try:
        yield holder
    finally:
        holder.execute("SELECT pg_advisory_unlock_all()")
        holder.execute(f"DROP TRIGGER IF EXISTS igw_test_wait ON {TABLE}")
        holder.execute("DROP FUNCTION IF EXISTS igw_test_wait()")
        holder.close()


def _waiting_backends(holder: psycopg.Connection) -> list[int]:
    rows = holder.execute(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
    ).fetchall()
    return [row[0] for row in rows]


def _until(predicate, *, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_top_up_killed_before_its_key_completes_is_credited_once_on_retry(
    staff_key, alice, completion_held, tmp_path: Path
):
    path = f"/v1/admin/accounts/{alice.pk}/topups"
    body = {"amount": "25.00", "note": "invoice 46", "reference": "inv-46"}
    before = Wallet.objects.get(account=alice).balance
    log = tmp_path / "gunicorn.log"
    with gunicorn_serving(log_path=log, env={"GUNICORN_WORKER_CLASS": ""}) as base_url:

        def post() -> requests.Response:
            return requests.post(
                base_url + path,
                json=body,
                headers={"Authorization": f"Bearer {staff_key}", "Idempotency-Key": "topup-46"},
                timeout=30,
            )

        unanswered: list[BaseException] = []

        def first_call() -> None:
            try:
                post()
            except requests.ConnectionError as exc:
                unanswered.append(exc)

        first = threading.Thread(target=first_call)
        first.start()
        _until(lambda: _waiting_backends(completion_held))
        [backend] = _waiting_backends(completion_held)
        [worker] = gunicorn_worker_pids(base_url)
        os.kill(worker, signal.SIGKILL)
        first.join(timeout=30)
        # The killed worker's completion never reaches the database: its session ends mid-wait.
        completion_held.execute("SELECT pg_terminate_backend(%s)", (backend,))
        completion_held.execute("SELECT pg_advisory_unlock(%s)", (LOCK,))
        _until(
            lambda: (
                not completion_held.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend,)
                ).fetchall()
            )
        )
        completion_held.execute(f"DROP TRIGGER igw_test_wait ON {TABLE}")
        # The key's lock runs out (GATEWAY_HOLD_TTL_SECONDS after its claim): a retry may take it over.
        IdempotencyRecord.objects.filter(key="topup-46").update(
            locked_until=timezone.now() - timedelta(seconds=1)
        )
        _until(lambda: len(gunicorn_worker_pids(base_url)) == 1)

        retried = post()
        replayed = post()

    assert unanswered  # the first call got no answer: its worker died
    assert retried.status_code == 201, (retried.text, log.read_text()[-3000:])
    assert replayed.status_code == 201 and replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.json() == retried.json()
    assert Wallet.objects.get(account=alice).balance == before + Decimal("25.00")
    assert LedgerEntry.objects.filter(wallet__account=alice, reference="inv-46").count() == 1
    assert IdempotencyRecord.objects.get(key="topup-46").status == IdempotencyRecord.Status.COMPLETED
    assert ledger_check() == []
