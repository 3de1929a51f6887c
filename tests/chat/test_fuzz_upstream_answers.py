"""Any JSON value in any position of a provider's answer: the caller gets the answer, or the
upstream's failure in the family's error shape (a 502, never a 500), and the money stays right: no
hold left open, at most one charge, never more than the hold, the ledger's invariants kept.

A provider is not ours: a broken release, a proxy in between or a hostile endpoint can answer
anything. Hypothesis takes a well-formed answer of each upstream kind (a whole body, or one event of
a stream) and puts arbitrary JSON in one of its places (usage counts as strings or 2^70, a `choices`
that is an object, a `delta` that is a list), or replaces an event's data with any text. Every text
endpoint is sent to both kinds of upstream, natively and through the translators.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.cache import cache
from hypothesis import given
from hypothesis import strategies as st

from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.chat.conftest import (
    ANTHROPIC_BASE,
    KEY_ENV,
    OPENAI_BASE,
    assert_in_family_shape,
    messages_events,
    sse_body,
)
from tests.factories import text_model_make, upstream_make
from tests.fuzz_values import fuzz_settings, json_places, json_replaced, json_values, texts

pytestmark = pytest.mark.django_db

# Keys and strings the answer readers give a meaning to (usage, events, blocks), so that the fuzz
# reaches their branches.
MEANINGFUL = [
    "usage", "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
    "cached_tokens", "input_tokens", "output_tokens", "cache_read_input_tokens",
    "cache_creation_input_tokens", "input_tokens_details", "output_tokens_details", "choices",
    "delta", "message", "content", "text", "type", "index", "finish_reason", "stop_reason", "role",
    "tool_calls", "function", "arguments", "id", "model", "response", "output", "output_text",
    "message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta",
    "content_block_stop", "text_delta", "input_json_delta", "tool_use", "thinking", "error",
    "response.completed", "response.output_text.delta", "response.created", "[DONE]", "assistant",
    "candidates", "parts", "usageMetadata", "promptTokenCount", "candidatesTokenCount",
    "thoughtsTokenCount", "functionCall", "args", "thought", "finishReason", "inlineData",
]  # fmt: skip
TEXTS = texts(MEANINGFUL)
JSON_VALUES = json_values(TEXTS, max_leaves=12)
FUZZ = fuzz_settings(share=2)

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
RESPONSES_URL = f"{OPENAI_BASE}/responses"
MESSAGES_URL = f"{ANTHROPIC_BASE}/messages"
COUNT_URL = f"{ANTHROPIC_BASE}/messages/count_tokens"
GEMINI_BASE = "https://generativelanguage.test/v1beta"
GEMINI_GENERATE = f"{GEMINI_BASE}/models/gemini-2.5-flash:generateContent"
GEMINI_STREAM = f"{GEMINI_BASE}/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
GEMINI_COUNT = f"{GEMINI_BASE}/models/gemini-2.5-flash:countTokens"

CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "vendor-chat-1",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello!", "tool_calls": None},
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 20},
        "completion_tokens_details": {"reasoning_tokens": 10},
    },
}
_CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "vendor-chat-1"}
CHAT_EVENTS = [
    ("", {**_CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
    ("", {**_CHUNK, "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}),
    (
        "",
        {
            **_CHUNK,
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]},
                }
            ],
        },
    ),
    ("", {**_CHUNK, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}),
    ("", {**_CHUNK, "choices": [], "usage": CHAT_ANSWER["usage"]}),
    ("", "[DONE]"),
]
RESPONSES_USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 20},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 10},
    "total_tokens": 150,
}
RESPONSES_ANSWER = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello!"}],
        }
    ],
    "usage": RESPONSES_USAGE,
}
RESPONSES_EVENTS = [
    ("response.created", {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1"}}),
    (
        "response.output_text.delta",
        {"type": "response.output_text.delta", "sequence_number": 1, "output_index": 0, "delta": "Hi"},
    ),
    (
        "response.completed",
        {"type": "response.completed", "sequence_number": 2, "response": RESPONSES_ANSWER},
    ),
]
MESSAGES_USAGE = {
    "input_tokens": 100,
    "cache_read_input_tokens": 20,
    "cache_creation_input_tokens": 10,
    "output_tokens": 1,
}
MESSAGES_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "vendor-claude-1",
    "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "Hello!"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {**MESSAGES_USAGE, "output_tokens": 30},
}
MESSAGES_EVENTS = messages_events(
    message={**MESSAGES_ANSWER, "content": [], "stop_reason": None, "usage": MESSAGES_USAGE},
    tool_use={"type": "tool_use", "id": "t", "name": "f", "input": {}},
    arguments="{}",
    stop_reason="end_turn",
    output_tokens=30,
)
GEMINI_ANSWER = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "Hello", "thought": True},
                    {"text": "Hello!"},
                    {"functionCall": {"name": "f", "args": {"a": 1}}},
                ],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 120,
        "cachedContentTokenCount": 20,
        "candidatesTokenCount": 30,
        "thoughtsTokenCount": 4,
    },
}
GEMINI_EVENTS = [
    (
        "",
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}],
            "usageMetadata": {"promptTokenCount": 120},
        },
    ),
    ("", GEMINI_ANSWER),
]
# By the upstream's API: the URL of a whole answer and that answer, the URL of a stream and its events.
ANSWERS: dict[str, tuple[str, dict[str, Any], str, list[tuple[str, Any]]]] = {
    "chat": (CHAT_URL, CHAT_ANSWER, CHAT_URL, CHAT_EVENTS),
    "responses": (RESPONSES_URL, RESPONSES_ANSWER, RESPONSES_URL, RESPONSES_EVENTS),
    "messages": (MESSAGES_URL, MESSAGES_ANSWER, MESSAGES_URL, MESSAGES_EVENTS),
    "gemini": (GEMINI_GENERATE, GEMINI_ANSWER, GEMINI_STREAM, GEMINI_EVENTS),
    "count": (COUNT_URL, {"input_tokens": 42}, COUNT_URL, []),
    "gemini count": (GEMINI_COUNT, {"totalTokens": 42}, GEMINI_COUNT, []),
}
# (the caller's endpoint, the model) -> the error shape, and the upstream's API it is sent to.
CALLS = {
    ("/v1/chat/completions", "alpha-chat"): ("compatible", "chat"),
    ("/v1/chat/completions", "alpha-claude"): ("compatible", "messages"),
    ("/v1/chat/completions", "alpha-gemini"): ("compatible", "gemini"),
    ("/v1/responses", "alpha-chat"): ("compatible", "responses"),
    ("/v1/responses", "alpha-claude"): ("compatible", "messages"),
    ("/v1/responses", "alpha-gemini"): ("compatible", "gemini"),
    ("/v1/messages", "alpha-claude"): ("native", "messages"),
    ("/v1/messages", "alpha-chat"): ("native", "chat"),
    ("/v1/messages", "alpha-gemini"): ("native", "gemini"),
}
# count_tokens, where the upstream counts (a model on a Chat Completions upstream is counted here):
# free, and never streamed.
COUNTS = {
    ("/v1/messages/count_tokens", "alpha-claude"): ("native", "count"),
    ("/v1/messages/count_tokens", "alpha-gemini"): ("native", "gemini count"),
}
BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 500},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 500},
    "/v1/messages": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 500},
    "/v1/messages/count_tokens": {"messages": [{"role": "user", "content": "Hi"}]},
}


@pytest.fixture
def fuzzed(client, upstream, chat_model, claude_model, chat_group, tara, tara_key, settings):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.001, "max_wait": 0.005}
    gemini = upstream_make(name="gemini", base_url=GEMINI_BASE, api_key_env=KEY_ENV, kind="gemini")
    text_model_make(
        model_id="alpha-gemini", group=chat_group, upstreams=[gemini], upstream_model="gemini-2.5-flash"
    )
    wallet_top_up(account=tara, amount="1000.00", reference="fuzz")

    def send(
        path: str,
        model: str,
        stream: bool,
        url: str,
        answer: str | bytes,
        content_type: str,
        status: int = 200,
    ):
        cache.clear()  # the circuit a run of bad answers opens, the rate windows
        upstream.reset()
        upstream.post(url, body=answer, content_type=content_type, status=status)
        body = {**BODIES[path], "model": model}
        if stream:
            body["stream"] = True
        return client.post(
            path, data=json.dumps(body), content_type="application/json", headers={"x-api-key": tara_key}
        )

    return send


def assert_answered_well(
    response, shape: str, account, charges_before: int, *, refused: bool = False
) -> None:
    """The answer, or the upstream's failure in the family's shape; and at most one charge, no more
    than the call's hold, with nothing left held."""
    status = response.status_code
    if not refused:
        assert status == 200 or status in (502, 503, 504), (status, response.content[:500])
    assert_in_family_shape(response, shape)
    record = UsageRecord.objects.latest("id")
    charges = list(LedgerEntry.objects.filter(kind="charge").order_by("id")[charges_before:])
    assert len(charges) <= 1
    if charges:
        hold = Hold.objects.get(reference=record.request_id)
        assert -charges[0].amount == record.amount <= hold.amount
        assert status == 200
    else:
        assert record.amount == 0
    assert Wallet.objects.get(account=account).balance >= 0
    assert ledger_check() == []


@pytest.mark.parametrize(("path", "model"), [*CALLS, *COUNTS])
@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_any_json_in_a_whole_answer_is_the_answer_or_the_upstreams_failure(
    fuzzed, tara, path, model, data, value
):
    shape, api = {**CALLS, **COUNTS}[(path, model)]
    url, answer, _, _ = ANSWERS[api]
    at = data.draw(st.sampled_from(json_places(answer, added="usage")))
    before = LedgerEntry.objects.filter(kind="charge").count()
    fuzzed_answer = json.dumps(json_replaced(answer, at, value))

    response = fuzzed(path, model, False, url, fuzzed_answer, "application/json")

    assert_answered_well(response, shape, tara, before)
    if at == () and not isinstance(value, dict):
        assert response.status_code == 502  # every text API answers an object


@pytest.mark.parametrize(("path", "model"), list(CALLS))
@FUZZ
@given(data=st.data(), value=JSON_VALUES | TEXTS)
def test_any_json_in_a_streamed_event_is_the_stream_or_the_upstreams_failure(
    fuzzed, tara, path, model, data, value
):
    shape, api = CALLS[(path, model)]
    _, _, url, events = ANSWERS[api]
    index = data.draw(st.integers(min_value=0, max_value=len(events) - 1))
    name, event = events[index]
    if isinstance(value, str) and data.draw(st.booleans()):
        event = value  # the event's data as any text, JSON or not
    else:
        event = json_replaced(event, data.draw(st.sampled_from(json_places(event, added="usage"))), value)
    # On the wire as bytes: half of a surrogate pair in the text goes as the three bytes that encode
    # it, which are not UTF-8.
    stream = sse_body(*events[:index], (name, event), *events[index + 1 :]).encode("utf-8", "surrogatepass")
    before = LedgerEntry.objects.filter(kind="charge").count()

    response = fuzzed(path, model, True, url, stream, "text/event-stream")

    assert_answered_well(response, shape, tara, before)


ERROR_BODY = {
    "error": {"message": "No.", "type": "invalid_request_error", "param": "messages", "code": "bad"}
}


@pytest.mark.parametrize(("path", "model"), list(CALLS))
@FUZZ
@given(
    data=st.data(),
    value=JSON_VALUES,
    status=st.sampled_from([400, 401, 403, 404, 409, 413, 422, 429, 500, 529]),
)
def test_any_json_in_an_upstream_refusal_is_passed_on_or_the_upstreams_failure(
    fuzzed, tara, path, model, data, value, status
):
    shape, api = CALLS[(path, model)]
    url, _, stream_url, _ = ANSWERS[api]
    stream = data.draw(st.booleans())
    at = data.draw(st.sampled_from(json_places(ERROR_BODY, added="usage")))
    refusal = json_replaced(ERROR_BODY, at, value)
    before = LedgerEntry.objects.filter(kind="charge").count()

    response = fuzzed(
        path,
        model,
        stream,
        stream_url if stream else url,
        json.dumps(refusal),
        "application/json",
        status=status,
    )

    assert response.status_code < 500 or response.status_code in (502, 503, 504), response.content[:500]
    assert response.status_code != 200
    assert_answered_well(response, shape, tara, before, refused=True)
