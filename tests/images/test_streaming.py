"""`stream: true`: the official SDK receives partial and completed events in order; the call is
charged once the completed event arrived; a stream cut by the upstream ends with an error event and
no charge; refusals before the stream are plain JSON errors."""

from __future__ import annotations

import base64
import io
import json
from decimal import Decimal

import openai
import pytest
from django.core.cache import cache
from PIL import Image

from billing.ledger import wallet_adjust
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from keys.services import api_key_create
from tests.images.test_images_api import model_upsert


@pytest.fixture(autouse=True)
def clean_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def key(alice, alpha_group):
    return api_key_create(account=alice, group=alpha_group)[1]


@pytest.fixture
def demo_streaming_model(alpha_group, demo_upstream):
    return model_upsert(
        model_id="alpha-stream", group=alpha_group, upstreams=[demo_upstream], stream_supported=True
    )


@pytest.fixture
def fake_streaming_model(alpha_group, fake_upstream_make):
    upstream = fake_upstream_make("fake-stream", timeout_seconds=5)
    return model_upsert(
        model_id="alpha-fake-stream", group=alpha_group, upstreams=[upstream], stream_supported=True
    )


def charges():
    return LedgerEntry.objects.filter(kind="charge").count()


@pytest.mark.django_db(transaction=True)
def test_the_sdk_receives_partial_then_completed_events_and_the_call_is_charged_once(
    live_server, alice, key, demo_streaming_model
):
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=key, max_retries=0)
    stream = client.images.generate(
        model="alpha-stream", prompt="a harbour", size="64x64", stream=True, partial_images=2
    )
    events = list(stream)
    assert [e.type for e in events] == [
        "image_generation.partial_image",
        "image_generation.partial_image",
        "image_generation.completed",
    ]
    assert [e.partial_image_index for e in events[:2]] == [0, 1]
    final = Image.open(io.BytesIO(base64.b64decode(events[-1].b64_json)))
    assert final.size == (64, 64)
    assert charges() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
    record = UsageRecord.objects.get()
    assert (record.status, record.amount) == (200, Decimal("0.15"))


@pytest.mark.django_db(transaction=True)
def test_events_from_an_upstream_are_relayed_in_order(
    live_server, alice, key, fake_streaming_model, fake_upstream
):
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=key, max_retries=0)
    events = list(
        client.images.generate(model="alpha-fake-stream", prompt="x", stream=True, partial_images=3)
    )
    assert [e.type for e in events] == ["image_generation.partial_image"] * 3 + ["image_generation.completed"]
    sent = fake_upstream.requests()[0]["json"]
    assert (sent["stream"], sent["partial_images"]) == (True, 3)
    assert charges() == 1


@pytest.mark.django_db(transaction=True)
def test_a_stream_cut_by_the_upstream_ends_with_an_error_event_and_no_charge(
    live_server, alice, key, fake_streaming_model, fake_upstream
):
    fake_upstream.script("/v1/images/generations", {"action": "cut_stream", "partials": 1})
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=key, max_retries=0)
    received = []
    with pytest.raises(openai.APIError) as info:
        for event in client.images.generate(
            model="alpha-fake-stream", prompt="x", stream=True, partial_images=2
        ):
            received.append(event.type)
    assert received == ["image_generation.partial_image"]
    assert info.value.body["type"] == "upstream_error"
    assert charges() == 0
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("10"), Decimal("0"))
    assert not Hold.objects.filter(status="open").exists()
    assert UsageRecord.objects.get().status == 502
    assert len(fake_upstream.requests()) == 1  # a started stream is never retried


@pytest.mark.django_db
def test_refusals_before_the_stream_are_plain_json_errors(client, alice, key, demo_streaming_model):
    wallet_adjust(account=alice, amount="-9.90", note="leave 0.10")
    response = client.post(
        "/v1/images/generations",
        content_type="application/json",
        data=json.dumps({"model": "alpha-stream", "prompt": "x", "stream": True}),
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "INSUFFICIENT_BALANCE"
    assert not Hold.objects.exists()


@pytest.mark.django_db
def test_a_stream_cannot_carry_an_idempotency_key(client, alice, key, demo_streaming_model):
    response = client.post(
        "/v1/images/generations",
        content_type="application/json",
        data=json.dumps({"model": "alpha-stream", "prompt": "x", "stream": True}),
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "k1"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream"
    assert not Hold.objects.exists()


@pytest.mark.django_db
def test_a_model_that_does_not_stream_refuses_stream_true(client, key, alpha_model):
    response = client.post(
        "/v1/images/generations",
        content_type="application/json",
        data=json.dumps({"model": "alpha-image-2", "prompt": "x", "stream": True}),
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream"


@pytest.mark.django_db
def test_an_edit_streams_image_edit_events(client, alice, key, demo_streaming_model):
    source = io.BytesIO()
    Image.new("RGB", (64, 64), (9, 9, 9)).save(source, "PNG")
    source.seek(0)
    source.name = "s.png"
    response = client.post(
        "/v1/images/edits",
        data={
            "model": "alpha-stream",
            "prompt": "x",
            "image": source,
            "stream": "true",
            "partial_images": "1",
        },
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    body = b"".join(response.streaming_content).decode()
    assert [line for line in body.splitlines() if line.startswith("event:")] == [
        "event: image_edit.partial_image",
        "event: image_edit.completed",
    ]
    assert charges() == 1


@pytest.mark.django_db(transaction=True)
def test_a_client_that_leaves_mid_stream_is_charged_once_the_upstream_completes(
    live_server, alice, key, fake_streaming_model, fake_upstream
):
    import time

    import requests

    response = requests.post(
        f"{live_server.url}/v1/images/generations",
        json={"model": "alpha-fake-stream", "prompt": "x", "stream": True, "partial_images": 3},
        headers={"Authorization": f"Bearer {key}"},
        stream=True,
        timeout=10,
    )
    first = next(response.iter_lines())
    assert first.startswith(b"event: image_generation.partial_image")
    response.close()  # the client goes away after the first partial image
    deadline = time.monotonic() + 10
    while not UsageRecord.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the gateway finishes reading the upstream in its own thread
    record = UsageRecord.objects.get()
    assert (record.status, record.amount) == (200, Decimal("0.15"))
    assert charges() == 1
    assert not Hold.objects.filter(status="open").exists()
