"""Retries, failover, circuit breaking and deadlines against real fake-upstream processes on
127.0.0.1 (tests/fake_upstream.py), scripted per test. Every failure asserts nothing was charged."""

from __future__ import annotations

import json
import time
from collections import Counter
from decimal import Decimal

import pytest
from django.core.cache import cache

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from keys.services import api_key_create
from tests.images.test_images_api import model_upsert
from upstreams.circuit import circuit_state
from upstreams.routing import upstreams_for_model
from upstreams.services import upstream_upsert

pytestmark = pytest.mark.django_db
GEN = "/v1/images/generations"
KEY_ENV = "TEST_FAULTS_UPSTREAM_KEY"


@pytest.fixture(autouse=True)
def setup(settings, monkeypatch):
    cache.clear()
    monkeypatch.setenv(KEY_ENV, "sk-provider-key")
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.01, "max_wait": 2.0}
    yield
    cache.clear()


def upstream(name, fake, *, priority=0, weight=1, timeout=2):
    row, _ = upstream_upsert(
        name=name,
        kind="openai",
        base_url=fake.base_url if fake else "http://127.0.0.1:9/v1",
        api_key_env=KEY_ENV,
        timeout_seconds=timeout,
        priority=priority,
        weight=weight,
        enabled=True,
    )
    return row


@pytest.fixture
def key(alice, alpha_group):
    return api_key_create(account=alice, group=alpha_group)[1]


def generate(client, key):
    return client.post(
        "/v1/images/generations",
        data=json.dumps({"model": "faulty", "prompt": "x"}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def assert_not_charged(account):
    wallet = Wallet.objects.get(account=account)
    assert (wallet.balance, wallet.held) == (Decimal("10"), Decimal("0"))
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert not Hold.objects.filter(status="open").exists()


def test_every_upstream_answering_503_gives_503_with_retry_after(
    client, alice, key, alpha_group, fake_upstream, second_fake_upstream
):
    a, b = upstream("a", fake_upstream), upstream("b", second_fake_upstream, priority=1)
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[a, b])
    busy = {"status": 503, "json": {"error": {"message": "overloaded"}}}
    fake_upstream.script(GEN, *[busy] * 6)
    second_fake_upstream.script(GEN, *[busy] * 6)
    response = generate(client, key)
    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert_not_charged(alice)
    assert UsageRecord.objects.get().status == 503


def test_an_upstream_429_retry_after_is_honoured(client, alice, key, alpha_group, fake_upstream):
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[upstream("a", fake_upstream)])
    fake_upstream.script(
        GEN, {"status": 429, "json": {"error": {"message": "slow down"}}, "headers": {"Retry-After": "1"}}
    )
    started = time.monotonic()
    response = generate(client, key)
    assert response.status_code == 200
    assert time.monotonic() - started >= 1.0  # waited as told, not the 10 ms base delay
    assert len(fake_upstream.requests()) == 2
    assert LedgerEntry.objects.filter(kind="charge").count() == 1


def test_every_upstream_answering_429_gives_429(client, alice, key, alpha_group, fake_upstream, settings):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "max_retries": 1}
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[upstream("a", fake_upstream)])
    limited = {"status": 429, "json": {"error": {"message": "slow down"}}, "headers": {"Retry-After": "1"}}
    fake_upstream.script(GEN, limited, limited)
    response = generate(client, key)
    assert response.status_code == 429
    assert response.json()["error"]["type"] == "rate_limit_error"
    assert response["Retry-After"] == "1"
    assert_not_charged(alice)


@pytest.mark.parametrize(
    ("given", "answered"),
    # Past what a float holds, or not a number: read as no Retry-After, as an unreadable one is.
    [("1e400", "1"), ("nan", "1"), ("1e300", "86400"), ("Fri, 31 Dec 9999 23:59:59 GMT", "86400")],
)
def test_an_upstreams_absurd_retry_after_is_answered_as_at_most_a_day(
    client, alice, key, alpha_group, fake_upstream, settings, given, answered
):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "max_retries": 0}
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[upstream("a", fake_upstream)])
    limited = {"status": 429, "json": {"error": {"message": "slow down"}}, "headers": {"Retry-After": given}}
    fake_upstream.script(GEN, limited)
    response = generate(client, key)
    assert response.status_code == 429, response.content
    assert response["Retry-After"] == answered
    assert_not_charged(alice)


def test_a_connection_dropped_mid_answer_is_not_retried_or_charged(
    client, alice, key, alpha_group, fake_upstream, second_fake_upstream
):
    a, b = upstream("a", fake_upstream), upstream("b", second_fake_upstream, priority=1)
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[a, b])
    fake_upstream.script(GEN, {"action": "drop"})
    response = generate(client, key)
    assert response.status_code == 502
    # The provider may have made the image: neither this upstream nor the next one is asked again.
    assert len(fake_upstream.requests()) == 1
    assert second_fake_upstream.requests() == []
    assert_not_charged(alice)


@pytest.mark.parametrize("encoding", ["declared", "gzip"])
def test_an_answer_over_the_size_bound_is_not_retried_or_charged(
    client, alice, key, alpha_group, fake_upstream, second_fake_upstream, settings, encoding
):
    """The bound holds whether the body's length is declared or comes out of decoding a small one."""
    settings.GATEWAY_UPSTREAM_ANSWER_MAX_BYTES = 2**20
    a, b = upstream("a", fake_upstream), upstream("b", second_fake_upstream, priority=1)
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[a, b])
    huge = json.dumps({"created": 1, "data": [{"b64_json": "A" * 2**21}]})
    answer = {"status": 200, "body": huge, "content_type": "application/json", "gzip": encoding == "gzip"}
    fake_upstream.script(GEN, answer)

    response = generate(client, key)

    assert response.status_code == 502, response.content
    assert len(fake_upstream.requests()) == 1
    assert second_fake_upstream.requests() == []
    assert_not_charged(alice)
    # No connection with an unread answer on it went back to the pool: the next call is answered.
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[a])
    assert generate(client, key).status_code == 200


def test_an_open_circuit_skips_the_upstream_without_a_network_call_and_a_probe_closes_it(
    client, alice, key, alpha_group, fake_upstream, second_fake_upstream, settings
):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "circuit_threshold": 2, "circuit_cooldown": 1.0}
    a, b = upstream("a", fake_upstream), upstream("b", second_fake_upstream, priority=1)
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[a, b])
    fake_upstream.script(GEN, *[{"status": 500, "json": {"error": {"message": "down"}}}] * 2)
    assert generate(client, key).status_code == 200  # a fails, b answers
    assert generate(client, key).status_code == 200  # a fails again: its circuit opens
    assert circuit_state(upstream_id=a.pk).state == "open"
    calls_to_a = len(fake_upstream.requests())
    assert generate(client, key).status_code == 200
    assert len(fake_upstream.requests()) == calls_to_a  # skipped: no network call
    time.sleep(1.1)  # the cooldown is what is being tested
    assert generate(client, key).status_code == 200
    assert len(fake_upstream.requests()) == calls_to_a + 1  # the probe
    assert circuit_state(upstream_id=a.pk).state == "closed"
    assert UsageRecord.objects.filter(upstream="a").count() == 1


def test_lower_priority_upstreams_are_tried_first(
    client, key, alpha_group, fake_upstream, second_fake_upstream
):
    a, b = (
        upstream("a", fake_upstream, priority=0),
        upstream("b", second_fake_upstream, priority=5, weight=100),
    )
    model_upsert(model_id="faulty", group=alpha_group, upstreams=[b, a])
    for _ in range(10):
        assert generate(client, key).status_code == 200
    assert len(fake_upstream.requests()) == 10
    assert second_fake_upstream.requests() == []


def test_weight_spreads_load_within_a_priority(alpha_group, fake_upstream, second_fake_upstream):
    heavy, light = (
        upstream("heavy", fake_upstream, weight=3),
        upstream("light", second_fake_upstream, weight=1),
    )
    model = model_upsert(model_id="faulty", group=alpha_group, upstreams=[heavy, light])
    firsts = Counter(
        upstreams_for_model(model_label="images.ImageModel", model_pk=model.pk)[0].name for _ in range(4000)
    )
    assert 0.70 < firsts["heavy"] / 4000 < 0.80  # 3:1 -> 75 %
    assert set(firsts) == {"heavy", "light"}
