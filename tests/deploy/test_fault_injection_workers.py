"""A worker killed with calls in flight (docs/failure-modes.md, "A worker killed"): gunicorn (one
gevent worker) on PostgreSQL and a Redis of the test's own, image calls held at the fake upstream
while the worker gets SIGKILL. The master gives back the dead process's concurrency slots and
releases its open holds at once (`worker_gone`), not when their leases and TTLs end."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from decimal import Decimal

import pytest
import requests
from django.db import connection

from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, Wallet
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.factories import alpha_group_make, image_model_make
from tests.gunicorn_server import gunicorn_serving, gunicorn_worker_pids
from tests.redis_process import redis_process

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]

GEN = "/v1/images/generations"
CONCURRENCY = 4
SLOT_TTL = 120  # the gateway's lease of a slot: what a dead worker's slots would otherwise wait
HELD_SECONDS = 30  # how long the fake upstream keeps the first calls


@pytest.fixture
def alpha_group(db):
    return alpha_group_make(rpm=10_000, concurrency=CONCURRENCY)


def _generate(base_url: str, key: str, request_id: str) -> int | None:
    try:
        return requests.post(
            f"{base_url}{GEN}",
            json={"model": "alpha-fake", "prompt": request_id},
            headers={"Authorization": f"Bearer {key}", "X-Request-Id": request_id},
            timeout=60,
        ).status_code
    except requests.RequestException:
        return None  # no answer: the worker died


def _until(predicate, *, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_killed_workers_slots_and_holds_are_given_back_at_once(
    alice, alpha_group, fake_upstream_make, fake_upstream, tmp_path
):
    wallet_top_up(account=alice, amount="100.00", reference="load")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[fake_upstream_make()], price="0.25")
    key = api_key_create(account=alice, group=alpha_group, label="kill")[1]
    fake_upstream.script(GEN, *[{"delay": HELD_SECONDS}] * CONCURRENCY)
    balance = Wallet.objects.get(account=alice).balance
    log = tmp_path / "gunicorn.log"
    with redis_process() as server:
        env = {
            "REDIS_URL": server.url,
            "GUNICORN_WORKER_CLASS": "",
            "GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS": str(SLOT_TTL),
            "GATEWAY_RETRY_MAX": "0",
        }
        with gunicorn_serving(log_path=log, env=env) as base_url:
            cut: list[int | None] = []
            callers = [
                threading.Thread(target=lambda i=i: cut.append(_generate(base_url, key, f"kw-cut-{i}")))
                for i in range(CONCURRENCY)
            ]
            for caller in callers:
                caller.start()
            _until(lambda: len(fake_upstream.requests()) == CONCURRENCY)
            assert Hold.objects.filter(status="open").count() == CONCURRENCY
            [worker] = gunicorn_worker_pids(base_url)
            os.kill(worker, signal.SIGKILL)
            killed_at = time.monotonic()
            for caller in callers:
                caller.join(timeout=60)
            _until(lambda: not Hold.objects.filter(status="open").exists(), seconds=60)
            released_after = time.monotonic() - killed_at

            after = Counter(_generate(base_url, key, f"kw-after-{i}") for i in range(2 * CONCURRENCY))

    assert cut == [None] * CONCURRENCY
    assert released_after < SLOT_TTL / 2  # well before the slots' lease (and the holds' TTL) ends
    # The new worker serves the credential's full concurrency at once (before: 429 for SLOT_TTL).
    assert after == {200: 2 * CONCURRENCY}, (after, log.read_text()[-3000:])
    assert "gave back 4 concurrency slot(s) of process" in log.read_text()
    assert "released 4 open hold(s) of process" in log.read_text()
    assert set(Hold.objects.filter(reference__startswith="kw-cut-").values_list("status", flat=True)) == {
        "released"
    }
    assert not LedgerEntry.objects.filter(reference__startswith="kw-cut-").exists()
    assert Wallet.objects.get(account=alice).balance == balance - 2 * CONCURRENCY * Decimal("0.25")
    assert Wallet.objects.get(account=alice).held == 0
    assert ledger_check() == []
