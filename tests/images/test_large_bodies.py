"""A ~4 MB image over HTTP, end to end: the caller gets the upstream's base64 byte for byte in the body
json.dumps would build, a hosted link serves the same image, an idempotent retry replays the stored
body, and the call is charged once (the upstream mocked with `responses`)."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from urllib.parse import urlsplit

import pytest
from django.core.cache import cache

from billing.models import LedgerEntry, UsageRecord, Wallet
from keys.services import api_key_create
from tests.factories import image_model_make
from tests.fake_upstream import _png
from tests.images.conftest import OPENAI_BASE

pytestmark = pytest.mark.django_db

GENERATIONS = f"{OPENAI_BASE}/images/generations"
LARGE_PNG = _png(pad_to=4_000_000)
LARGE_B64 = base64.b64encode(LARGE_PNG).decode()
REVISED = 'A "fox" \\ in snow, 猫\n'


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()  # rate counters and circuit state from other tests
    yield
    cache.clear()


@pytest.fixture
def large_model(alpha_group, openai_upstream):
    return image_model_make(
        model_id="alpha-large", group=alpha_group, upstreams=[openai_upstream], price="0.15", max_n=2
    )


@pytest.fixture
def key(alice, alpha_group):
    return api_key_create(account=alice, group=alpha_group, label="tests")[1]


def post(client, key, body: dict, **headers):
    return client.post(
        "/v1/images/generations",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}", **headers},
    )


def upstream_answers(mocked, n: int = 1) -> None:
    items = [{"b64_json": LARGE_B64, "revised_prompt": REVISED} for _ in range(n)]
    mocked.post(GENERATIONS, json={"created": 1713833628, "data": items, "usage": {"total_tokens": 9}})


def test_it_answers_a_large_image_byte_for_byte_and_charges_once(client, alice, key, large_model, mocked):
    upstream_answers(mocked, n=2)
    response = post(client, key, {"model": "alpha-large", "prompt": "a fox", "n": 2})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    item = {"b64_json": LARGE_B64, "revised_prompt": REVISED}
    expected = {"created": 1713833628, "data": [item, item], "usage": {"total_tokens": 9}}
    assert response.content == json.dumps(expected, separators=(",", ":")).encode()
    assert int(response["Content-Length"]) == len(response.content)
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert (UsageRecord.objects.get().status, UsageRecord.objects.get().amount) == (200, Decimal("0.15"))


def test_a_large_image_asked_as_url_is_hosted_whole(client, alice, key, large_model, mocked):
    upstream_answers(mocked)
    response = post(client, key, {"model": "alpha-large", "prompt": "a fox", "response_format": "url"})
    assert response.status_code == 200
    [item] = response.json()["data"]
    assert item["revised_prompt"] == REVISED
    image = client.get(urlsplit(item["url"]).path)
    assert image["Content-Type"] == "image/png"
    assert b"".join(image.streaming_content) == LARGE_PNG
    assert LedgerEntry.objects.filter(kind="charge").count() == 1


def test_an_idempotent_retry_replays_the_large_body_without_a_second_call(
    client, alice, key, large_model, mocked
):
    upstream_answers(mocked)
    body = {"model": "alpha-large", "prompt": "a fox"}
    first = post(client, key, body, **{"Idempotency-Key": "large-1"})
    again = post(client, key, body, **{"Idempotency-Key": "large-1"})
    assert (first.status_code, again.status_code) == (200, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert json.loads(again.content)["data"][0]["b64_json"] == LARGE_B64
    assert len(mocked.calls) == 1
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


def test_a_large_answer_with_broken_base64_is_a_502_and_not_charged(client, alice, key, large_model, mocked):
    broken = LARGE_B64[:1_000_000] + "!" + LARGE_B64[1_000_001:]
    mocked.post(GENERATIONS, json={"created": 1, "data": [{"b64_json": broken}]})
    response = post(client, key, {"model": "alpha-large", "prompt": "a fox"})
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "upstream_error"
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("10"), Decimal("0"))
    assert LedgerEntry.objects.filter(kind="charge").count() == 0
    assert UsageRecord.objects.get().status == 502
