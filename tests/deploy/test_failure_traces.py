"""What a failure leaves behind (docs/failure-modes.md): a concurrency slot of a dead worker is a
short lease, not a hold's TTL; a call whose database connection broke still gets its usage record."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from billing.holds import holds_release_stale
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.factories import alpha_group_make, image_model_make
from tests.postgres_backends import backends_terminate
from tests.process_state import redis_health_fresh
from tests.redis_process import redis_process

pytestmark = pytest.mark.django_db(transaction=True)

GEN = "/v1/images/generations"


@pytest.fixture
def alpha_group(db):
    return alpha_group_make(rpm=100, concurrency=2)


@pytest.fixture
def key(alice, alpha_group, fake_upstream_make):
    upstream = fake_upstream_make("fake-openai")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[upstream], price="0.25")
    return api_key_create(account=alice, group=alpha_group, label="traces")[1]


def generate(client, key):
    return client.post(
        GEN,
        {"model": "alpha-fake", "prompt": "x"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


def test_it_leases_a_concurrency_slot_for_far_less_than_a_hold(client, key, fake_upstream, monkeypatch):
    with redis_process() as server, override_settings(REDIS_URL=server.url, CACHES=server.caches()):
        # The new server starts reachable: a failure of the previous one (e.g. a timeout under load
        # while the fixtures ran) would otherwise send the slot to the per-process store.
        redis_health_fresh(monkeypatch)
        fake_upstream.script(GEN, {"delay": 0.6})
        seen: list[int] = []

        answered = threading.Event()

        def look() -> None:
            """The slot's lease, looked at while the call is in flight (its upstream takes 0.6 s)."""
            direct = redis.Redis.from_url(server.url)
            while not seen and not answered.is_set():
                seen.extend(direct.ttl(name) for name in direct.keys("*concurrency*"))
                time.sleep(0.01)

        looker = threading.Thread(target=look)
        looker.start()
        assert generate(client, key).status_code == 200
        answered.set()
        looker.join()

    assert len(seen) == 1
    assert 0 < seen[0] <= settings.GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS <= 120
    assert settings.GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS < settings.GATEWAY_HOLD_TTL_SECONDS


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="terminates PostgreSQL backends")
def test_it_records_a_call_whose_database_connections_were_cut_during_it(client, key, alice, fake_upstream):
    refused = {"status": 500, "delay": 0.6, "json": {"error": {"message": "boom", "type": "server_error"}}}
    fake_upstream.script(GEN, refused, refused, refused, refused, refused, refused)
    cutter = threading.Timer(0.3, backends_terminate)
    cutter.start()
    with override_settings(GATEWAY_RETRY={**settings.GATEWAY_RETRY, "max_retries": 0}):
        answer = generate(client, key)
    cutter.join()

    assert answer.status_code == 502, answer.content
    connection.close()
    record = UsageRecord.objects.get()
    assert (record.status, record.amount) == (502, 0)
    # Its hold is released now or, should the release have hit the cut, by release_stale_holds.
    holds_release_stale(now=timezone.now() + timedelta(seconds=settings.GATEWAY_HOLD_TTL_SECONDS + 1))
    assert not Hold.objects.filter(status="open").exists()
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert Wallet.objects.get(account=alice).held == 0
    assert ledger_check() == []
