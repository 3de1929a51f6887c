"""The fuzz of tests/chat/test_fuzz_bodies.py on every translated pair: any JSON value in any field of
a text body sent to a model whose upstream speaks another family (an OpenAI-compatible server,
Anthropic, Gemini) is never a 5xx, a refusal comes in the caller's family's shape, and no money is
lost. The providers answer at the HTTP boundary (`responses`), in their own shapes, streamed when
asked."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.ledger import wallet_top_up
from billing.selectors import ledger_check
from tests.chat.conftest import KEY_ENV, PROVIDER_KEY
from tests.chat.test_fuzz_bodies import (
    FAMILIES,
    JSON_VALUES,
    MAX_OUTPUT_TOKENS,
    assert_answered_well,
    placed,
    recorded_case,
)
from tests.factories import text_model_make, upstream_make
from tests.fuzz_values import fuzz_settings

pytestmark = pytest.mark.django_db

FUZZ = fuzz_settings(share=2)
CHAT_ANSWER = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1},
}
CHAT_STREAM = (
    'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}\n\n'
    'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\ndata: [DONE]\n\n'
)
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 5, "output_tokens": 1},
}
MESSAGE_STREAM = "".join(
    f"event: {name}\ndata: {json.dumps(data)}\n\n"
    for name, data in (
        (
            "message_start",
            {"type": "message_start", "message": {**MESSAGE, "content": [], "usage": {"input_tokens": 5}}},
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        ),
        ("message_stop", {"type": "message_stop"}),
    )
)
GEMINI_ANSWER = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1},
}


def _streamed(request) -> bool:
    try:
        return json.loads(request.body).get("stream") is True
    except (ValueError, AttributeError):
        return False


def _chat(request):
    if _streamed(request):
        return 200, {"Content-Type": "text/event-stream"}, CHAT_STREAM
    return 200, {"Content-Type": "application/json"}, json.dumps(CHAT_ANSWER)


def _messages(request):
    if _streamed(request):
        return 200, {"Content-Type": "text/event-stream"}, MESSAGE_STREAM
    return 200, {"Content-Type": "application/json"}, json.dumps(MESSAGE)


def _gemini(request):
    if ":streamGenerateContent" in request.url:
        return 200, {"Content-Type": "text/event-stream"}, f"data: {json.dumps(GEMINI_ANSWER)}\n\n"
    if ":countTokens" in request.url:
        return 200, {"Content-Type": "application/json"}, json.dumps({"totalTokens": 5})
    return 200, {"Content-Type": "application/json"}, json.dumps(GEMINI_ANSWER)


KINDS = {  # kind: (base URL, the provider's answer)
    "openai-compatible": ("https://compatible.test/v1", _chat),
    "anthropic": ("https://anthropic.test/v1", _messages),
    "gemini": ("https://gemini.test/v1beta", _gemini),
}


@pytest.fixture
def translated(request, chat_group, tara, tara_key, client, upstream, monkeypatch):
    kind = request.param
    base, answer = KINDS[kind]
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    provider = upstream_make(name=f"fuzz-{kind}", base_url=base, api_key_env=KEY_ENV, kind=kind)
    # The fuzz sends `demo-chat` (tests/chat/test_fuzz_bodies.py): here it is served by `kind`.
    text_model_make(
        model_id="demo-chat",
        group=chat_group,
        upstreams=[provider],
        upstream_model="m",
        max_output_tokens=MAX_OUTPUT_TOKENS,
    )
    wallet_top_up(account=tara, amount="1000.00", reference="fuzz")
    upstream.add_callback("POST", re.compile(re.escape(base) + ".*"), callback=answer)

    def send(path: str, body: dict[str, Any]):
        return client.post(
            path, data=json.dumps(body), content_type="application/json", headers={"x-api-key": tara_key}
        )

    return send


@pytest.mark.parametrize("translated", list(KINDS), indirect=True)
@pytest.mark.parametrize("path", list(FAMILIES))
@FUZZ
@given(data=st.data(), value=JSON_VALUES, stream=st.booleans())
def test_any_json_value_in_any_field_of_a_translated_call_is_never_a_server_error(
    translated, path, data, value, stream
):
    body, shape, places = FAMILIES[path]
    body = placed(body, data.draw(st.sampled_from(places)), value)
    if stream and not path.endswith("count_tokens"):
        body["stream"] = True

    assert_answered_well(translated(path, body), shape)
    assert ledger_check() == []


@pytest.mark.parametrize("translated", list(KINDS), indirect=True)
@FUZZ
@given(data=st.data(), value=JSON_VALUES, stream=st.booleans())
def test_any_json_value_anywhere_in_a_recorded_client_body_of_a_translated_call_is_never_a_server_error(
    translated, data, value, stream
):
    path, body = recorded_case(data, value, stream=stream)

    assert_answered_well(translated(path, body), FAMILIES[path][1])
    assert ledger_check() == []
