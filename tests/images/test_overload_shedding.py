"""A worker process that cannot keep up sheds new calls at once (api/shedding.py): 503 `overloaded`
with Retry-After, before anything is reserved (never billed), counted in /metrics; and once it has
caught up, calls are served again.

The worker is made to fall behind for real: the test's thread holds the interpreter lock for half a
second (a long switch interval and a busy loop), so the lag sampler's thread (core/overload.py)
wakes that late, as it would behind a worker's calls; or a call is made slow to start (its hold's
reserve waits for a row lock), so the next is shed though the process was never late.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from decimal import Decimal

import pytest
from django.db import connection, connections, transaction

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from core.overload import REMEMBERED_SECONDS, start_delay, worker_lag
from keys.services import api_key_create
from tests.api.test_metrics import TOKEN, scrape
from tests.factories import image_model_make

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(alice, alpha_group, demo_upstream, settings, monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    settings.GATEWAY_METRICS_TOKEN = TOKEN
    settings.GATEWAY_METRICS_PUBLIC = False
    image_model_make(model_id="alpha-shed", group=alpha_group, upstreams=[demo_upstream], price="0.15")
    return api_key_create(account=alice, group=alpha_group)[1]


def generate(client, key: str):
    return client.post(
        "/v1/images/generations",
        data=json.dumps({"model": "alpha-shed", "prompt": "a fox", "response_format": "b64_json"}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def fall_behind(seconds: float) -> None:
    """Hold the interpreter lock for `seconds`: no other thread of the process runs meanwhile."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(seconds * 10)
    try:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            pass
    finally:
        sys.setswitchinterval(interval)


def test_a_worker_far_behind_sheds_a_new_call_at_once_unbilled_and_counted(client, settings, alice, key):
    settings.GATEWAY_SHED_LAG_SECONDS = 0.2
    worker_lag()  # the process's sampler runs from the first read on
    time.sleep(0.2)
    balance = Wallet.objects.get(account=alice).balance
    shed_before = scrape(client).value("gateway_calls_shed_total")

    fall_behind(0.5)
    assert worker_lag() > 0.2
    shed = generate(client, key)

    assert shed.status_code == 503, shed.content
    assert shed.json()["error"]["code"] == "overloaded"
    assert shed["Retry-After"] == "1"
    assert scrape(client).value("gateway_calls_shed_total") == shed_before + 1
    # Nothing reserved, charged or recorded.
    assert Wallet.objects.get(account=alice).balance == balance
    assert not Hold.objects.exists() and not LedgerEntry.objects.filter(kind="charge").exists()
    assert not UsageRecord.objects.exists()

    time.sleep(REMEMBERED_SECONDS + 0.2)  # caught up
    served = generate(client, key)

    assert served.status_code == 200, served.content
    assert Wallet.objects.get(account=alice).balance == balance - Decimal("0.15")
    assert scrape(client).value("gateway_calls_shed_total") == shed_before + 1


def test_without_the_setting_a_worker_behind_sheds_nothing(client, settings, alice, key):
    settings.GATEWAY_SHED_LAG_SECONDS = 0
    worker_lag()
    time.sleep(0.2)

    fall_behind(0.5)
    served = generate(client, key)

    assert served.status_code == 200, served.content
    assert LedgerEntry.objects.filter(kind="charge").count() == 1


def test_reads_are_not_shed(client, settings, key):
    settings.GATEWAY_SHED_LAG_SECONDS = 0.2
    worker_lag()
    time.sleep(0.2)

    fall_behind(0.5)
    models = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})

    assert models.status_code == 200, models.content
    assert "alpha-shed" in {model["id"] for model in models.json()["data"]}


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a row lock held by another connection")
@pytest.mark.django_db(transaction=True)
def test_a_worker_slow_to_start_its_calls_sheds_the_next_one_though_it_is_never_late(
    client, settings, alice, key
):
    """The lag stays short (nothing holds the process), but a call took longer than the limit to reach
    its upstream: its reserve waited for the wallet's row, locked by another transaction."""
    settings.GATEWAY_SHED_LAG_SECONDS = 0.3
    worker_lag()
    time.sleep(REMEMBERED_SECONDS + 0.2)  # what an earlier test left behind has lapsed
    balance = Wallet.objects.get(account=alice).balance
    locked, done = threading.Event(), threading.Event()

    def hold_the_wallet() -> None:
        try:
            with transaction.atomic():
                Wallet.objects.select_for_update().get(account=alice)
                locked.set()
                time.sleep(0.6)
        finally:
            connections.close_all()
            done.set()

    threading.Thread(target=hold_the_wallet, daemon=True).start()
    assert locked.wait(10)
    slow = generate(client, key)
    assert done.wait(10)

    assert slow.status_code == 200, slow.content
    assert worker_lag() < 0.3
    assert start_delay() >= 0.5
    shed = generate(client, key)

    assert shed.status_code == 503, shed.content
    assert shed.json()["error"]["code"] == "overloaded"
    assert Wallet.objects.get(account=alice).balance == balance - Decimal("0.15")  # the first call only
    assert LedgerEntry.objects.filter(kind="charge").count() == 1

    time.sleep(2 * REMEMBERED_SECONDS + 0.1)  # no call started slowly since
    assert start_delay() == 0
    served = generate(client, key)

    assert served.status_code == 200, served.content
    assert LedgerEntry.objects.filter(kind="charge").count() == 2
