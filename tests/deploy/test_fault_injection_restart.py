"""PostgreSQL restarted under a running gateway (docs/failure-modes.md, "PostgreSQL"): every backend
of the test database terminated, as a restart does to its clients, while each worker's pool holds
idle connections (and the billing statements' kept one). The calls after it must all succeed: a
billing statement or an idempotency claim that meets a connection the server ended before running
it is run again once on a fresh connection, and the pool checks what it lends meanwhile.

Real processes on loopback: gunicorn (two gevent workers) on the test database and the fake upstream.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
import requests
from django.db import connection

from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from core.db import database_reconnect
from keys.services import api_key_create
from tests.factories import image_model_make
from tests.gunicorn_server import gunicorn_serving
from tests.postgres_backends import backends_terminate

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]

GEN = "/v1/images/generations"
WARM = 16
AFTER = 40
PRICE = Decimal("0.25")


def _call(base_url: str, key: str, index: str) -> tuple[str, int]:
    headers = {"Authorization": f"Bearer {key}", "X-Request-Id": f"rs-{index}"}
    if int(index.rsplit("-", 1)[1]) % 2 == 0:
        headers["Idempotency-Key"] = f"rs-key-{index}"
    response = requests.post(
        f"{base_url}{GEN}", json={"model": "alpha-fake", "prompt": index}, headers=headers, timeout=30
    )
    return f"rs-{index}", response.status_code


def test_every_call_after_a_restart_succeeds_and_is_charged_once(
    alice, alpha_group, fake_upstream_make, fake_upstream, tmp_path
):
    wallet_top_up(account=alice, amount="100.00", reference="load")
    image_model_make(
        model_id="alpha-fake", group=alpha_group, upstreams=[fake_upstream_make()], price=str(PRICE)
    )
    key = api_key_create(account=alice, group=alpha_group, label="restart")[1]
    balance = Wallet.objects.get(account=alice).balance
    log = tmp_path / "gunicorn.log"
    env = {"WEB_CONCURRENCY": "2", "GUNICORN_WORKER_CLASS": "", "DATABASE_POOL_MAX_SIZE": "4"}
    with gunicorn_serving(log_path=log, env=env) as base_url:
        with ThreadPoolExecutor(max_workers=8) as pool:
            warm = Counter(
                status for _, status in pool.map(lambda i: _call(base_url, key, f"warm-{i}"), range(WARM))
            )
        backends_terminate()
        database_reconnect()  # this process's own connections were ended too
        with ThreadPoolExecutor(max_workers=8) as pool:
            after = dict(pool.map(lambda i: _call(base_url, key, f"after-{i}"), range(AFTER)))

    assert warm == {200: WARM}
    assert Counter(after.values()) == {200: AFTER}, (Counter(after.values()), log.read_text()[-4000:])
    charges = Counter(
        LedgerEntry.objects.filter(kind="charge", reference__startswith="rs-").values_list(
            "reference", flat=True
        )
    )
    assert set(charges) == set(after) | {f"rs-warm-{i}" for i in range(WARM)}
    assert set(charges.values()) == {1}
    assert Wallet.objects.get(account=alice).balance == balance - (WARM + AFTER) * PRICE
    assert not Hold.objects.filter(status="open").exists()
    assert UsageRecord.objects.filter(request_id__startswith="rs-after-", status=200).count() == AFTER
    assert ledger_check() == []
