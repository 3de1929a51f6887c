"""Any JSON value in any position of an image provider's answer: the caller gets images, or the
upstream's failure (a 502, never a 500), and the money stays right: no hold left open, at most one
charge of the model's price, and only for an answer the caller got, the ledger's invariants kept.

Hypothesis takes a well-formed answer of each kind the gateway reads (OpenAI's `b64_json` and `url`
answers, its stream's events, Gemini's `inlineData` parts) and puts arbitrary JSON in one of its
places, or replaces a stream event's data with any text. Links point at the upstream's own host,
which answers the image, so a fuzzed answer reaches the download too.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pytest
from django.core.cache import cache
from hypothesis import given
from hypothesis import strategies as st

from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.factories import image_model_make, upstream_make
from tests.fuzz_values import fuzz_settings, json_places, json_replaced, json_values, texts
from tests.images.conftest import OPENAI_BASE, OPENAI_KEY_ENV, image_bytes

pytestmark = pytest.mark.django_db

MEANINGFUL = [
    "data", "b64_json", "url", "revised_prompt", "created", "usage", "input_tokens", "output_tokens",
    "type", "image_generation.partial_image", "image_generation.completed", "partial_image_index",
    "error", "message", "candidates", "content", "parts", "inlineData", "mimeType", "image/png",
    "text", "finishReason", "usageMetadata", "https://api.provider.test/files/img-1.png",
    "https://evil.test/x.png", "iVBORw0KGgo=",
]  # fmt: skip
TEXTS = texts(MEANINGFUL)
JSON_VALUES = json_values(TEXTS, max_leaves=12)
FUZZ = fuzz_settings(share=2)

PNG = image_bytes()
PNG_B64 = base64.b64encode(PNG).decode()
GENERATIONS = f"{OPENAI_BASE}/images/generations"
IMAGE_URL = "https://api.provider.test/files/img-1.png"
GEMINI_BASE = "https://generativelanguage.test/v1beta"
GEMINI_GENERATE = f"{GEMINI_BASE}/models/gemini-image:generateContent"
PRICE = Decimal("0.15")

B64_ANSWER = {
    "created": 1713833628,
    "data": [{"b64_json": PNG_B64, "revised_prompt": "A fox."}],
    "usage": {"total_tokens": 100, "input_tokens": 50, "output_tokens": 50},
}
URL_ANSWER = {"created": 1713833628, "data": [{"url": IMAGE_URL, "revised_prompt": "A fox."}]}
GEMINI_ANSWER = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [{"text": "A fox."}, {"inlineData": {"mimeType": "image/png", "data": PNG_B64}}],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1290},
}
PARTIAL, COMPLETED = "image_generation.partial_image", "image_generation.completed"
STREAM_EVENTS = [
    (PARTIAL, {"type": PARTIAL, "b64_json": PNG_B64, "partial_image_index": 0}),
    (COMPLETED, {"type": COMPLETED, "b64_json": PNG_B64, "usage": {"input_tokens": 5, "output_tokens": 9}}),
]
# The model called, its upstream's URL and its answer.
WHOLE = {
    "b64": ("alpha-openai", GENERATIONS, B64_ANSWER),
    "url": ("alpha-openai", GENERATIONS, URL_ANSWER),
    "gemini": ("alpha-gemini", GEMINI_GENERATE, GEMINI_ANSWER),
}


@pytest.fixture
def fuzzed(client, mocked, dns, alice, alpha_group, provider_key, monkeypatch, settings):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.001, "max_wait": 0.005}
    openai = upstream_make(name="provider", base_url=OPENAI_BASE, api_key_env=OPENAI_KEY_ENV)
    gemini = upstream_make(name="gemini", base_url=GEMINI_BASE, api_key_env=OPENAI_KEY_ENV, kind="gemini")
    dns["generativelanguage.test"] = [["93.184.215.16"]]
    image_model_make(
        model_id="alpha-openai",
        group=alpha_group,
        upstreams=[openai],
        price=str(PRICE),
        upstream_model="gpt-image-1",
        stream_supported=True,
    )
    image_model_make(
        model_id="alpha-gemini",
        group=alpha_group,
        upstreams=[gemini],
        price=str(PRICE),
        upstream_model="gemini-image",
    )
    wallet_top_up(account=alice, amount="1000.00", reference="fuzz")
    _, key = api_key_create(account=alice, group=alpha_group)

    def send(model: str, url: str, answer: bytes, content_type: str, *, stream: bool = False):
        cache.clear()  # the circuit a run of bad answers opens, the rate windows
        mocked.reset()
        mocked.post(url, body=answer, content_type=content_type)
        mocked.get(IMAGE_URL, body=PNG, content_type="image/png")
        body: dict[str, Any] = {"model": model, "prompt": "a fox"}
        if stream:
            body.update(stream=True, partial_images=1)
        return client.post(
            "/v1/images/generations",
            data=json.dumps(body),
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )

    return send


def assert_answered_well(response, account, charges_before: int) -> None:
    """Images, or the upstream's failure; a charge of the model's price only for images answered."""
    status = response.status_code
    assert status == 200 or status in (502, 503, 504), (status, response.content[:500])
    if status != 200:
        assert isinstance(response.json()["error"]["message"], str)
    elif response.streaming:
        stream = b"".join(response.streaming_content)
        assert stream.startswith(b"event: ") or stream.startswith(b"data: "), stream[:200]
    else:
        images = response.json()["data"]
        assert images and all(isinstance(image, dict) for image in images)
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    record = UsageRecord.objects.latest("id")
    charges = list(LedgerEntry.objects.filter(kind="charge").order_by("id")[charges_before:])
    assert len(charges) <= 1
    if charges:
        assert status == 200
        assert -charges[0].amount == record.amount == PRICE
    else:
        assert record.amount == 0
    assert Wallet.objects.get(account=account).balance >= 0
    assert ledger_check() == []


@pytest.mark.parametrize("kind", list(WHOLE))
@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_any_json_in_an_image_answer_is_images_or_the_upstreams_failure(fuzzed, alice, kind, data, value):
    model, url, answer = WHOLE[kind]
    at = data.draw(st.sampled_from(json_places(answer, added="error")))
    before = LedgerEntry.objects.filter(kind="charge").count()

    response = fuzzed(model, url, json.dumps(json_replaced(answer, at, value)).encode(), "application/json")

    assert_answered_well(response, alice, before)


@FUZZ
@given(data=st.data(), value=JSON_VALUES | TEXTS)
def test_any_json_in_an_image_streams_event_is_the_stream_or_the_upstreams_failure(
    fuzzed, alice, data, value
):
    index = data.draw(st.integers(min_value=0, max_value=len(STREAM_EVENTS) - 1))
    events = list(STREAM_EVENTS)
    name, event = events[index]
    if isinstance(value, str) and data.draw(st.booleans()):
        events[index] = (name, value)  # the event's data as any text, JSON or not
    else:
        at = data.draw(st.sampled_from(json_places(event, added="error")))
        events[index] = (name, json_replaced(event, at, value))
    wire = "".join(
        f"event: {name}\ndata: {data if isinstance(data, str) else json.dumps(data)}\n\n"
        for name, data in events
    )
    before = LedgerEntry.objects.filter(kind="charge").count()

    # On the wire as bytes: half of a surrogate pair goes as the three bytes that encode it.
    response = fuzzed(
        "alpha-openai", GENERATIONS, wire.encode("utf-8", "surrogatepass"), "text/event-stream", stream=True
    )

    assert_answered_well(response, alice, before)
