"""The `openai` adapter against recorded OpenAI-shaped answers (HTTP mocked with `responses` only)."""

from __future__ import annotations

import base64
import io
import json
import logging

import pytest
import requests
from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.http.multipartparser import MultiPartParser
from urllib3.exceptions import MaxRetryError, NewConnectionError

from api.upstream_errors import upstream_error_to_api_error
from images.validation import generation_params_validate
from tests.images.conftest import OPENAI_BASE, OPENAI_KEY, OPENAI_KEY_ENV, image_bytes, mask_bytes
from tests.images.test_edit_validation import edit_validate, files, form, upload
from upstreams.errors import UpstreamMisconfigured
from upstreams.providers import ADAPTERS, adapter_for
from upstreams.providers.base import ImageRequest, UpstreamError
from upstreams.providers.openai import OpenAIAdapter

pytestmark = pytest.mark.django_db

GENERATIONS = f"{OPENAI_BASE}/images/generations"
EDITS = f"{OPENAI_BASE}/images/edits"
PNG_B64 = base64.b64encode(image_bytes()).decode()

# Shaped like the real API's answers (gpt-image-1 and dall-e-3).
GPT_IMAGE_OK = {
    "created": 1713833628,
    "data": [{"b64_json": PNG_B64}],
    "usage": {
        "total_tokens": 100,
        "input_tokens": 50,
        "output_tokens": 50,
        "input_tokens_details": {"text_tokens": 10, "image_tokens": 40},
    },
}
DALLE_OK = {
    "created": 1713833628,
    "data": [
        {
            "revised_prompt": "A red fox sitting in fresh snow at dusk.",
            "url": "https://api.provider.test/files/img-abc.png?se=2026-01-01&sig=xyz",
        }
    ],
}


def request_for(model, body: dict, upstream_model: str = "gpt-image-1") -> ImageRequest:
    """What the pipeline builds from validated parameters."""
    params = generation_params_validate(body=body, image_model=model)
    return ImageRequest(
        operation="generate",
        upstream_model=upstream_model,
        prompt=params.prompt,
        n=params.n,
        size=params.size,
        output_format=params.output_format,
        response_format=params.response_format,
        options=params.options,
    )


def sent_json(mocked) -> dict:
    assert len(mocked.calls) == 1
    return json.loads(mocked.calls[0].request.body)


def sent_form(mocked):
    request = mocked.calls[0].request
    body = request.body
    parser = MultiPartParser(
        {"CONTENT_TYPE": request.headers["Content-Type"], "CONTENT_LENGTH": str(len(body))},
        io.BytesIO(body),
        [MemoryFileUploadHandler()],
    )
    return parser.parse()


def test_the_openai_kind_is_registered(openai_upstream):
    assert ADAPTERS["openai"] is OpenAIAdapter
    assert isinstance(adapter_for(openai_upstream), OpenAIAdapter)


def test_generation_sends_only_the_allowed_fields_and_the_upstream_model_name(
    alpha_model, openai_upstream, mocked
):
    mocked.post(GENERATIONS, json=GPT_IMAGE_OK)
    body = {
        "model": "alpha-image-2",
        "prompt": "a red fox",
        "n": 2,
        "size": "1024x1024",
        "quality": "high",
        "output_format": "jpeg",
        "output_compression": 70,
        "user": "u-1",
        "seed": 42,
        "api_key": "sk-caller",
        "metadata": {"x": 1},
    }
    adapter_for(openai_upstream).image_call(request_for(alpha_model, body))
    assert sent_json(mocked) == {
        "model": "gpt-image-1",
        "prompt": "a red fox",
        "n": 2,
        "size": "1024x1024",
        "quality": "high",
        "output_format": "jpeg",
        "output_compression": 70,
        "user": "u-1",
    }
    headers = mocked.calls[0].request.headers
    assert headers["Authorization"] == f"Bearer {OPENAI_KEY}"
    assert headers["Content-Type"] == "application/json"


def test_it_sends_response_format_except_to_gpt_image_models(alpha_model, openai_upstream, mocked):
    mocked.post(GENERATIONS, json=DALLE_OK)
    adapter_for(openai_upstream).image_call(
        request_for(alpha_model, {"prompt": "p", "response_format": "url"}, upstream_model="dall-e-3")
    )
    assert sent_json(mocked) == {"model": "dall-e-3", "prompt": "p", "n": 1, "response_format": "url"}


def test_it_does_not_send_the_stream_fields_on_the_json_path(streaming_model, openai_upstream, mocked):
    mocked.post(GENERATIONS, json=GPT_IMAGE_OK)
    adapter_for(openai_upstream).image_call(
        request_for(streaming_model, {"prompt": "p", "stream": True, "partial_images": 2})
    )
    assert "stream" not in sent_json(mocked) and "partial_images" not in sent_json(mocked)


def test_it_maps_a_success_to_an_image_result(alpha_model, openai_upstream, mocked):
    mocked.post(GENERATIONS, json=GPT_IMAGE_OK)
    result = adapter_for(openai_upstream).image_call(request_for(alpha_model, {"prompt": "p"}))
    assert result.created == 1713833628
    assert [item.b64_json for item in result.items] == [PNG_B64]
    assert result.usage == GPT_IMAGE_OK["usage"]

    mocked.post(GENERATIONS, json=DALLE_OK)
    result = adapter_for(openai_upstream).image_call(
        request_for(alpha_model, {"prompt": "p"}, upstream_model="dall-e-3")
    )
    assert result.items[0].url == DALLE_OK["data"][0]["url"]
    assert result.items[0].revised_prompt == "A red fox sitting in fresh snow at dusk."
    assert result.usage is None


def test_an_edit_is_multipart_with_image_and_mask(alpha_model, openai_upstream, mocked):
    mocked.post(EDITS, json=GPT_IMAGE_OK)
    source, mask = image_bytes("JPEG"), mask_bytes()
    params, images, got_mask = edit_validate(
        data=form(prompt="add a hat", n="1", size="1024x1024", input_fidelity="high", seed="1"),
        files=files(image=upload(source, "x.png"), mask=upload(mask, "m.png")),
        image_model=alpha_model,
    )
    adapter_for(openai_upstream).image_call(
        ImageRequest(
            operation="edit",
            upstream_model="gpt-image-1",
            prompt=params.prompt,
            n=params.n,
            size=params.size,
            response_format=params.response_format,
            options=params.options,
            images=images,
            mask=got_mask,
        )
    )
    fields, parts = sent_form(mocked)
    assert fields.dict() == {
        "model": "gpt-image-1",
        "prompt": "add a hat",
        "n": "1",
        "size": "1024x1024",
        "input_fidelity": "high",
    }
    assert parts["image"].read() == source
    assert parts["image"].content_type == "image/jpeg"  # decided by the bytes, not the caller's name
    assert parts["mask"].read() == mask
    assert mocked.calls[0].request.headers["Authorization"] == f"Bearer {OPENAI_KEY}"


def test_several_images_are_sent_as_image_brackets(openai_upstream, mocked):
    mocked.post(EDITS, json=GPT_IMAGE_OK)
    images = (image_bytes(colour=(1, 1, 1)), image_bytes("WEBP"))
    adapter_for(openai_upstream).image_call(
        ImageRequest(operation="edit", upstream_model="gpt-image-1", prompt="p", images=images)
    )
    _, parts = sent_form(mocked)
    assert [part.read() for part in parts.getlist("image[]")] == list(images)
    assert "image" not in parts


def call_failing(upstream, mocked, **answer) -> tuple[UpstreamError, object]:
    mocked.post(GENERATIONS, **answer)
    with pytest.raises(UpstreamError) as info:
        adapter_for(upstream).image_call(
            ImageRequest(operation="generate", upstream_model="gpt-image-1", prompt="p")
        )
    return info.value, upstream_error_to_api_error(error=info.value, upstream=upstream)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_an_upstream_5xx_is_a_retryable_502(openai_upstream, mocked, status):
    error, api_error = call_failing(
        openai_upstream, mocked, status=status, json={"error": {"message": "boom"}}
    )
    assert error.retryable
    assert (api_error.status, api_error.type) == (502, "upstream_error")


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_provider_key_is_a_502_logged_for_the_operator(openai_upstream, mocked, caplog, status):
    body = {
        "error": {
            "message": f"Incorrect API key provided: {OPENAI_KEY}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    with caplog.at_level(logging.ERROR, logger="gateway.upstream"):
        error, api_error = call_failing(openai_upstream, mocked, status=status, json=body)
    assert not error.retryable
    assert (api_error.status, api_error.type, api_error.code) == (
        502,
        "upstream_error",
        "upstream_auth_failed",
    )
    assert OPENAI_KEY not in api_error.message
    assert "operator" in api_error.message
    logged = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert logged and "provider" in logged[0].getMessage() and OPENAI_KEY_ENV in logged[0].getMessage()
    assert OPENAI_KEY not in caplog.text


def test_a_read_timeout_is_a_504(openai_upstream, mocked):
    error, api_error = call_failing(openai_upstream, mocked, body=requests.ReadTimeout("read timed out"))
    assert (api_error.status, api_error.code) == (504, "upstream_timeout")
    assert error.sent


def test_a_refused_connection_is_a_retryable_502(openai_upstream, mocked):
    # What requests raises when nothing listens: the connection was never made, so nothing was sent.
    refused = requests.ConnectionError(
        MaxRetryError(None, "/v1/images/generations", NewConnectionError(None, "Connection refused"))
    )
    error, api_error = call_failing(openai_upstream, mocked, body=refused)
    assert error.retryable
    assert not error.outcome_unknown
    assert (api_error.status, api_error.type) == (502, "upstream_error")


@pytest.mark.parametrize(
    "answer",
    [
        {"status": 200, "body": "<html><body>Bad gateway</body></html>", "content_type": "text/html"},
        {"status": 200, "body": "{not json", "content_type": "application/json"},
        {"status": 200, "json": {"created": 1, "data": []}},
        {"status": 200, "json": {"created": 1, "data": [{"revised_prompt": "no image"}]}},
        {"status": 200, "json": ["not", "an", "object"]},
    ],
)
def test_an_html_or_invalid_success_body_is_a_502(openai_upstream, mocked, answer):
    error, api_error = call_failing(openai_upstream, mocked, **answer)
    assert error.status == 502
    assert (api_error.status, api_error.type) == (502, "upstream_error")


def test_a_429_passes_on_as_429_with_retry_after(openai_upstream, mocked):
    error, api_error = call_failing(
        openai_upstream,
        mocked,
        status=429,
        json={"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
        headers={"Retry-After": "7"},
    )
    assert error.retryable and error.retry_after == 7
    assert (api_error.status, api_error.type, api_error.headers["Retry-After"]) == (
        429,
        "rate_limit_error",
        "7",
    )


def test_a_missing_key_variable_is_a_502_for_the_operator_and_nothing_is_sent(
    openai_upstream, mocked, monkeypatch, caplog
):
    monkeypatch.delenv(OPENAI_KEY_ENV)
    with caplog.at_level(logging.ERROR, logger="gateway.upstream"):
        with pytest.raises(UpstreamMisconfigured) as info:
            adapter_for(openai_upstream).image_call(
                ImageRequest(operation="generate", upstream_model="m", prompt="p")
            )
        api_error = upstream_error_to_api_error(error=info.value, upstream=openai_upstream)
    assert len(mocked.calls) == 0
    assert (api_error.status, api_error.code) == (502, "upstream_misconfigured")
    assert OPENAI_KEY_ENV in caplog.text
