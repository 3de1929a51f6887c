"""Idempotency-Key over HTTP: 20 concurrent requests with one key against a live gateway make one
upstream call and one charge; every success carries the same body; another body is refused."""

from __future__ import annotations

import json
import threading
from decimal import Decimal

import pytest
import requests
from django.core.cache import cache
from django.db import connection

from billing.models import LedgerEntry, Wallet
from keys.services import api_key_create
from tests.images.test_images_api import model_upsert

IS_POSTGRES = connection.vendor == "postgresql"
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not IS_POSTGRES, reason="concurrent writers need PostgreSQL (SQLite serialises them)"),
]


def test_twenty_concurrent_requests_with_one_key_make_one_upstream_call_and_one_charge(
    live_server, alice, alpha_group, fake_upstream, fake_upstream_make
):
    cache.clear()
    upstream = fake_upstream_make("slow", timeout_seconds=10)
    model_upsert(model_id="alpha-slow", group=alpha_group, upstreams=[upstream])
    fake_upstream.script("/v1/images/generations", {"delay": 1.0})  # a slow success: the calls overlap
    key = api_key_create(account=alice, group=alpha_group)[1]
    url = f"{live_server.url}/v1/images/generations"
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "order-42-image"}
    body = {"model": "alpha-slow", "prompt": "x"}
    barrier = threading.Barrier(20)
    answers: list[requests.Response] = []
    lock = threading.Lock()

    def call():
        barrier.wait()
        response = requests.post(url, json=body, headers=headers, timeout=30)
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    statuses = sorted(r.status_code for r in answers)
    assert set(statuses) <= {200, 409}, statuses
    assert statuses.count(200) >= 1
    for refused in (r for r in answers if r.status_code == 409):
        assert refused.json()["error"]["code"] == "idempotency_key_in_use"
        assert refused.headers["Retry-After"]
    successes = {r.content for r in answers if r.status_code == 200}
    assert len(successes) == 1  # identical replies
    assert len(fake_upstream.requests()) == 1
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")

    replay = requests.post(url, json=body, headers=headers, timeout=30)
    assert replay.status_code == 200
    assert replay.content in successes
    assert len(fake_upstream.requests()) == 1

    reused = requests.post(
        url,
        data=json.dumps({**body, "prompt": "y"}),
        timeout=30,
        headers={**headers, "Content-Type": "application/json"},
    )
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
