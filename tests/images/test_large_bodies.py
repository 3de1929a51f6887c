"""A ~4 MB image over HTTP, end to end: the caller gets the upstream's base64 byte for byte in the body
json.dumps would build, a hosted link serves the same image, an idempotent retry replays the stored
body, and the call is charged once (the upstream mocked with `responses`)."""

from __future__ import annotations

import base64
import gc
import io
import json
import tracemalloc
from decimal import Decimal
from urllib.parse import urlsplit

import pytest
from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler

from billing.models import LedgerEntry, UsageRecord, Wallet
from keys.services import api_key_create
from tests.factories import image_model_make
from tests.fake_upstream import _png
from tests.images.conftest import OPENAI_BASE
from tests.request_signals import database_connection_kept

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


def _wsgi_call(key: str) -> int:
    """One call through the WSGI application as a server makes it: the answer is read, then closed."""
    body = json.dumps({"model": "alpha-large", "prompt": "a fox"}).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/v1/images/generations",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": "testserver",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {key}",
    }
    statuses = []
    with database_connection_kept():  # as Django's test client: the test's transaction survives
        answer = WSGIHandler()(environ, lambda status, headers: statuses.append(status))
        try:
            sent = sum(len(chunk) for chunk in answer)
        finally:
            answer.close()
    assert statuses == ["200 OK"] and sent > len(LARGE_B64)
    return sent


def test_a_finished_call_keeps_no_copy_of_its_body(key, large_model, mocked):
    """Without the cyclic garbage collector: what keeps the answer after the call (DRF keeps it on the
    view, which its request refers to and back) must let go of the body, or a worker grows by a body
    per call until the collector's next full pass (measured: 1 GB per worker, docs/benchmarks.md)."""
    upstream_answers(mocked)
    _wsgi_call(key)  # warm
    mocked.calls.reset()  # the mock's record of each call holds the answer it made
    gc.collect()
    gc.disable()
    tracemalloc.start()
    # What the `responses` mock (standing in for the upstream) allocates is its own business.
    not_the_mock = [tracemalloc.Filter(False, "*/responses/*")]
    try:
        before = tracemalloc.take_snapshot().filter_traces(not_the_mock)
        for _ in range(3):
            _wsgi_call(key)
            mocked.calls.reset()
        after = tracemalloc.take_snapshot().filter_traces(not_the_mock)
    finally:
        tracemalloc.stop()
        gc.enable()
    retained = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert retained < len(LARGE_B64) // 2, f"{retained:,} bytes kept after 3 calls"
