"""The gemini adapter through the gateway, with Google's API mocked at the HTTP boundary (`responses`)
by answers shaped like generateContent's, and the official openai SDK as the client."""

from __future__ import annotations

import base64
import io
import json
from decimal import Decimal

import openai
import pytest
import responses
from django.core.cache import cache
from PIL import Image

from billing.models import Hold, LedgerEntry, Wallet
from keys.services import api_key_create
from tests.images.test_images_api import model_upsert
from upstreams.providers.gemini import aspect_ratio_for
from upstreams.services import upstream_upsert

BASE = "https://generativelanguage.example/v1beta"
URL = f"{BASE}/models/gemini-image-model:generateContent"
KEY_ENV = "TEST_GEMINI_KEY"


def png(size=(32, 16), colour=(0, 0, 255)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return buffer.getvalue()


def answer(text="A red fox, photographed at dawn.", image=None) -> dict:
    parts = [{"text": text}] if text else []
    parts.append({"inlineData": {"mimeType": "image/png", "data": base64.b64encode(image or png()).decode()}})
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1290, "totalTokenCount": 1299},
        "modelVersion": "gemini-image-model",
    }


@pytest.fixture
def gemini_model(alpha_group, monkeypatch):
    cache.clear()
    monkeypatch.setenv(KEY_ENV, "AIzaTestKeyForTheGatewayOnly0123456789")
    upstream, _ = upstream_upsert(
        name="gemini",
        kind="gemini",
        base_url=BASE,
        api_key_env=KEY_ENV,
        timeout_seconds=5,
        priority=0,
        weight=1,
        enabled=True,
    )
    yield model_upsert(
        model_id="alpha-gemini",
        group=alpha_group,
        upstreams=[upstream],
        upstream_model="gemini-image-model",
        sizes=["1024x1024", "1792x1024", "1024x1792"],
        output_formats=["png", "jpeg"],
    )
    cache.clear()


@pytest.fixture
def key(alice, alpha_group):
    return api_key_create(account=alice, group=alpha_group)[1]


def post(client, key, body):
    return client.post(
        "/v1/images/generations",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.mark.parametrize(
    ("size", "ratio"),
    [
        ("1024x1024", "1:1"),
        ("1792x1024", "16:9"),
        ("1024x1792", "9:16"),
        ("1536x1024", "3:2"),
        ("auto", None),
    ],
)
def test_sizes_map_to_the_nearest_aspect_ratio(size, ratio):
    assert aspect_ratio_for(size) == ratio


@pytest.mark.django_db
@responses.activate
def test_it_generates_through_generate_content_with_the_key_header(client, alice, key, gemini_model):
    responses.post(URL, json=answer())
    response = post(client, key, {"model": "alpha-gemini", "prompt": "a fox", "size": "1792x1024", "n": 2})
    assert response.status_code == 200, response.content
    data = response.json()["data"]
    assert len(data) == 2
    assert data[0]["revised_prompt"] == "A red fox, photographed at dawn."
    assert Image.open(io.BytesIO(base64.b64decode(data[0]["b64_json"]))).size == (32, 16)
    assert len(responses.calls) == 2  # one image per generateContent call
    sent = responses.calls[0].request
    assert sent.headers["x-goog-api-key"] == "AIzaTestKeyForTheGatewayOnly0123456789"
    body = json.loads(sent.body)
    assert body["contents"][0]["parts"] == [{"text": "a fox"}]
    assert body["generationConfig"]["imageConfig"] == {"aspectRatio": "16:9"}
    assert "IMAGE" in body["generationConfig"]["responseModalities"]
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


@pytest.mark.django_db
@responses.activate
def test_it_converts_to_the_requested_output_format(client, key, gemini_model):
    responses.post(URL, json=answer(text=None))
    response = post(client, key, {"model": "alpha-gemini", "prompt": "x", "output_format": "jpeg"})
    item = response.json()["data"][0]
    assert Image.open(io.BytesIO(base64.b64decode(item["b64_json"]))).format == "JPEG"
    assert "revised_prompt" not in item or item["revised_prompt"] is None


def _odd(where: str, value):
    """`answer()` with `value` in one place the adapter reads."""
    good = answer()
    candidate = good["candidates"][0]
    places = {
        "candidates": lambda: good.update(candidates=value),
        "candidate": lambda: good.update(candidates=[value, candidate]),
        "content": lambda: candidate.update(content=value),
        "parts": lambda: candidate["content"].update(parts=value),
        "part": lambda: candidate["content"]["parts"].insert(0, value),
        "inlineData": lambda: candidate["content"]["parts"].insert(0, {"inlineData": value}),
        "data": lambda: candidate["content"]["parts"].insert(0, {"inlineData": {"data": value}}),
        "usageMetadata": lambda: good.update(usageMetadata=value),
    }
    places[where]()
    return good


@pytest.mark.django_db
@responses.activate
@pytest.mark.parametrize("value", [None, "x", 7, ["x"], {"a": 1}], ids=repr)
@pytest.mark.parametrize(
    "where", ["candidates", "candidate", "content", "parts", "part", "inlineData", "data", "usageMetadata"]
)
def test_a_value_of_another_type_in_an_answer_is_skipped_as_absent(
    client, alice, key, gemini_model, settings, where, value
):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.001, "max_wait": 0.005}
    responses.post(URL, json=_odd(where, value))

    response = post(client, key, {"model": "alpha-gemini", "prompt": "a fox"})

    # The image the answer still holds is served and charged. With none left, or with image data
    # that is not an image, the upstream failed.
    left = where not in ("candidates", "content", "parts") and (where, value) != ("data", "x")
    if left:
        assert response.status_code == 200, response.content
        assert len(response.json()["data"]) == 1
        assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
    else:
        assert response.status_code == 502, response.content
        assert response.json()["error"]["type"] == "upstream_error"
        assert Wallet.objects.get(account=alice).balance == Decimal("10.00")
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()


@pytest.mark.django_db
@responses.activate
def test_it_sends_the_image_and_mask_inline_for_edits(client, key, gemini_model):
    responses.post(URL, json=answer())
    mask = io.BytesIO()
    Image.new("RGBA", (32, 16), (0, 0, 0, 0)).save(mask, "PNG")
    source = io.BytesIO(png())
    source.name = "source.png"
    mask.seek(0)
    mask.name = "mask.png"
    response = client.post(
        "/v1/images/edits",
        data={"model": "alpha-gemini", "prompt": "make it red", "image": source, "mask": mask},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.content
    parts = json.loads(responses.calls[0].request.body)["contents"][0]["parts"]
    inline = [p["inlineData"] for p in parts if "inlineData" in p]
    assert [i["mimeType"] for i in inline] == ["image/png", "image/png"]
    assert base64.b64decode(inline[0]["data"]) == png()
    assert parts[0] == {"text": "make it red"}


@pytest.mark.django_db
@responses.activate
def test_a_request_error_passes_through_in_google_shape_and_is_not_charged(client, alice, key, gemini_model):
    responses.post(
        URL,
        status=400,
        json={
            "error": {
                "code": 400,
                "message": "Image generation is not available for this prompt.",
                "status": "INVALID_ARGUMENT",
            }
        },
    )
    response = post(client, key, {"model": "alpha-gemini", "prompt": "x"})
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == 400
    assert body["error"]["status"] == "invalid_argument"  # the spec's case, whatever the upstream's
    assert "not available" in body["error"]["message"]
    assert len(responses.calls) == 1  # a 4xx about the request is not retried
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert Wallet.objects.get(account=alice).balance == Decimal("10")


@pytest.mark.django_db
@responses.activate
def test_resource_exhausted_and_5xx_go_through_the_retry_rules(client, key, gemini_model, settings):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.01, "max_wait": 0.05}
    responses.post(
        URL,
        status=429,
        json={
            "error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}
        },
    )
    responses.post(
        URL,
        status=503,
        json={"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
    )
    responses.post(URL, json=answer())
    response = post(client, key, {"model": "alpha-gemini", "prompt": "x"})
    assert response.status_code == 200, response.content
    assert len(responses.calls) == 3


@pytest.mark.django_db(transaction=True)
def test_the_openai_sdk_works_against_a_gemini_upstream(live_server, alice, key, gemini_model):
    with (
        responses.RequestsMock() as mocked,
        openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=key, max_retries=0) as client,
    ):
        mocked.post(URL, json=answer())
        result = client.images.generate(model="alpha-gemini", prompt="a fox", size="1024x1024")
    assert result.data[0].revised_prompt == "A red fox, photographed at dawn."
    assert base64.b64decode(result.data[0].b64_json) == png()
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
