"""Redis unreachable: what a billed call gets (docs/failure-modes.md).

Each test runs the gateway in this process on a redis-server of its own (tests/redis_process.py),
which it stops and starts; the upstream is the fake upstream process.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from decimal import Decimal

import pytest
from django.test import override_settings

from api.errors import api_error_for
from billing.errors import ConcurrencyLimitExceeded, LimitsUnavailable, RateLimitExceeded
from billing.limits import concurrency_slot_acquire, concurrency_slot_release, rate_limit_hit
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from core import redis_health
from core.config_cache import config_generation
from keys.services import api_key_create
from tests.factories import alpha_group_make, image_model_make
from tests.process_state import redis_health_fresh
from tests.rate_windows import local_rate_window_wait
from tests.redis_process import redis_process

pytestmark = pytest.mark.django_db(transaction=True)

GEN = "/v1/images/generations"


@pytest.fixture
def alpha_group(db):
    """Alpha-Image with both limits on, so every call counts in Redis."""
    return alpha_group_make(rpm=100, concurrency=2)


@pytest.fixture
def own_redis(monkeypatch):
    with redis_process() as server, override_settings(REDIS_URL=server.url, CACHES=server.caches()):
        redis_health_fresh(monkeypatch)  # the outage a test makes is this server's alone
        yield server


@pytest.fixture
def limit_key() -> str:
    """A credential of this test alone, whatever the other tests counted."""
    return f"api_key:outage-{uuid.uuid4().hex}"


@pytest.fixture
def key(alice, alpha_group, fake_upstream_make):
    upstream = fake_upstream_make("fake-openai")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[upstream], price="0.25")
    return api_key_create(account=alice, group=alpha_group, label="outage")[1]


def generate(client, key, *, idempotency_key=None, prompt="x"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    if idempotency_key:
        headers["HTTP_IDEMPOTENCY_KEY"] = idempotency_key
    return client.post(
        GEN, {"model": "alpha-fake", "prompt": prompt}, content_type="application/json", **headers
    )


def charges(alice):
    return LedgerEntry.objects.filter(wallet__account=alice, kind="charge").count()


def stop_when_upstream_has_the_call(server, fake_upstream) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 10
        while not [r for r in fake_upstream.requests() if r["path"] == GEN] and time.monotonic() < deadline:
            time.sleep(0.02)
        server.stop()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_it_answers_200_for_a_call_captured_before_redis_stopped_and_replays_it_on_retry(
    client, own_redis, key, alice, fake_upstream
):
    # Redis stops while the call is at the upstream: the slot was taken, its release cannot be made.
    fake_upstream.script(GEN, {"delay": 0.5})
    stopper = stop_when_upstream_has_the_call(own_redis, fake_upstream)
    first = generate(client, key, idempotency_key="order-1")
    stopper.join()

    assert first.status_code == 200, first.content
    assert charges(alice) == 1
    retry = generate(client, key, idempotency_key="order-1")
    assert retry.status_code == 200, retry.content
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert charges(alice) == 1
    assert len([r for r in fake_upstream.requests() if r["path"] == GEN]) == 1
    assert UsageRecord.objects.filter(status=200, amount=Decimal("0.25")).count() == 1


def warnings_of(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gateway.redis" and r.levelno == logging.WARNING]


def test_it_counts_limits_per_process_while_redis_is_down_and_warns_once(own_redis, limit_key, caplog):
    own_redis.stop()
    local_rate_window_wait()
    with caplog.at_level(logging.WARNING, logger="gateway.redis"):
        for _ in range(3):
            rate_limit_hit(limit_key=limit_key, rpm=3)
        with pytest.raises(RateLimitExceeded) as refused:
            rate_limit_hit(limit_key=limit_key, rpm=3)
        slots = [concurrency_slot_acquire(limit_key=limit_key, limit=2) for _ in range(2)]
        with pytest.raises(ConcurrencyLimitExceeded):
            concurrency_slot_acquire(limit_key=limit_key, limit=2)
        concurrency_slot_release(slot=slots[0])
        assert concurrency_slot_acquire(limit_key=limit_key, limit=2) is not None
        assert config_generation() is None  # the configuration cache is off: the database answers

    assert refused.value.code == "rate_limit_exceeded"
    assert redis_health.redis_degraded()
    assert len(warnings_of(caplog)) == 1  # once per outage, not per call
    assert "gateway degraded" in warnings_of(caplog)[0].getMessage()


@override_settings(GATEWAY_REDIS_FAILURE_MODE="closed")
def test_it_refuses_with_503_while_redis_is_down_when_failing_closed(own_redis, limit_key):
    own_redis.stop()
    for take in (
        lambda: rate_limit_hit(limit_key=limit_key, rpm=3),
        lambda: concurrency_slot_acquire(limit_key=limit_key, limit=2),
    ):
        with pytest.raises(LimitsUnavailable) as refused:
            take()
        assert (api_error_for(refused.value).status, refused.value.code) == (503, "limits_unavailable")
        assert int(api_error_for(refused.value).headers["Retry-After"]) >= 1


@override_settings(GATEWAY_REDIS_FAILURE_MODE="closed")
def test_it_refuses_a_billed_call_with_503_before_anything_is_held_when_failing_closed(
    client, own_redis, key, alice, fake_upstream
):
    own_redis.stop()
    answer = generate(client, key)

    assert answer.status_code == 503, answer.content
    assert answer.json()["error"]["code"] == "limits_unavailable"
    assert int(answer.headers["Retry-After"]) >= 1
    assert charges(alice) == 0
    assert not [r for r in fake_upstream.requests() if r["path"] == GEN]
    assert Wallet.objects.get(account=alice).held == Decimal("0")


def test_it_uses_redis_again_after_the_retry_interval_once_it_is_back(own_redis, limit_key, caplog):
    own_redis.stop()
    rate_limit_hit(limit_key=limit_key, rpm=5)
    own_redis.start()
    # Within the retry interval Redis is not even tried; after it, the first success ends the outage.
    rate_limit_hit(limit_key=limit_key, rpm=5)
    assert redis_health.redis_degraded()
    with (
        caplog.at_level(logging.WARNING, logger="gateway.redis"),
        override_settings(GATEWAY_REDIS_RETRY_SECONDS=0),
    ):
        rate_limit_hit(limit_key=limit_key, rpm=5)
        slot = concurrency_slot_acquire(limit_key=limit_key, limit=1)
    assert not redis_health.redis_degraded()
    assert not slot.local
    assert "gateway recovered" in warnings_of(caplog)[-1].getMessage()


def test_it_serves_billed_calls_while_redis_is_down(client, own_redis, key, alice):
    own_redis.stop()
    answers = [generate(client, key, prompt=f"call {i}") for i in range(3)]

    assert [a.status_code for a in answers] == [200] * 3, answers[0].content
    assert charges(alice) == 3
    assert not Hold.objects.filter(status="open").exists()
