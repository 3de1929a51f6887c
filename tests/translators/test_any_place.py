"""Any JSON value in any place of a request that uses what each translator reads deepest (tool results
holding images and PDFs, signed and unsigned thinking, reasoning items, function outputs with images,
files by their bytes): a body for the upstream, or a TranslationRefused naming the field. The fuzz of
each translator's own suite replaces whole top-level fields; this one reaches every nested place.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz_values import fuzz_settings, json_places, json_replaced, json_values, texts
from translators import TranslatedCall, TranslationRefused, Translator
from translators.chained import Chained
from translators.chat_via_gemini import ChatViaGemini
from translators.chat_via_messages import ChatViaMessages
from translators.messages_via_chat import MessagesViaChat
from translators.responses_via_chat import ResponsesViaChat

MEANINGFUL = [
    "type", "text", "image", "document", "tool_use", "tool_result", "thinking", "signature", "source",
    "base64", "data", "media_type", "application/pdf", "content", "function_call", "function_call_output",
    "reasoning", "summary", "encrypted_content", "input_image", "input_file", "file_data", "image_url",
    "file", "output", "tool_calls", "assistant", "user", "tool", "data:application/pdf;base64,JV",
    "data:image/png;base64,iV",
]  # fmt: skip
VALUES = json_values(texts(MEANINGFUL), max_leaves=8)
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JV"}}
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iV"}}
TOOL_TURN = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "t", "signature": ""},
        {"type": "text", "text": "x"},
        {"type": "tool_use", "id": "c1", "name": "Read", "input": {}},
    ],
}
RESULT = {
    "type": "tool_result",
    "tool_use_id": "c1",
    "is_error": True,
    "content": [{"type": "text", "text": "a"}, PDF, IMAGE],
}


def messages_body(*, own_pdf: bool) -> dict[str, Any]:
    last = [RESULT, {"type": "text", "text": "more"}, *([PDF] if own_pdf else [])]
    return {
        "max_tokens": 10,
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "u" * 70},
        "messages": [{"role": "user", "content": "hi"}, TOOL_TURN, {"role": "user", "content": last}],
    }


RESPONSES_BODY = {
    "tools": [{"type": "function", "name": "f", "parameters": {}}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "input": [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JV"},
            ],
        },
        {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "s"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "o"},
                {"type": "input_image", "image_url": "data:image/png;base64,iV"},
            ],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
    ],
}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CHAT_BODY = {
    "reasoning_effort": "low",
    "temperature": 0.2,
    "top_p": 0.9,
    "max_tokens": 4000,
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {
                    "type": "file",
                    "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JV"},
                },
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iV"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "tool", "tool_call_id": "c2", "content": "y"},
    ],
}


def call(kind: str, upstream_model: str) -> TranslatedCall:
    return TranslatedCall("m", upstream_model, kind, max_tokens=100, created=0)


PAIRS: dict[str, tuple[Callable[[], Translator], dict[str, Any]]] = {
    "messages on gpt-4o": (lambda: MessagesViaChat(call("openai", "gpt-4o")), messages_body(own_pdf=True)),
    "messages on gpt-5": (lambda: MessagesViaChat(call("openai", "gpt-5")), messages_body(own_pdf=True)),
    "messages on a compatible server": (
        lambda: MessagesViaChat(call("openai-compatible", "deepseek-v4-pro")),
        messages_body(own_pdf=False),
    ),
    "messages on gemini 3": (
        lambda: Chained(MessagesViaChat, ChatViaGemini, call("gemini", "gemini-3-pro")),
        messages_body(own_pdf=True),
    ),
    "responses on a compatible server": (
        lambda: ResponsesViaChat(call("openai-compatible", "deepseek-v4-pro")),
        RESPONSES_BODY,
    ),
    "responses on claude": (
        lambda: Chained(ResponsesViaChat, ChatViaMessages, call("anthropic", "claude-sonnet-4-5")),
        RESPONSES_BODY,
    ),
    "responses on gemini 3": (
        lambda: Chained(ResponsesViaChat, ChatViaGemini, call("gemini", "gemini-3-pro")),
        RESPONSES_BODY,
    ),
    "chat on claude": (lambda: ChatViaMessages(call("anthropic", "claude-sonnet-4-5")), CHAT_BODY),
    "chat on gemini 3": (lambda: ChatViaGemini(call("gemini", "gemini-3-pro")), CHAT_BODY),
}


@pytest.mark.parametrize("pair", list(PAIRS))
@fuzz_settings()
@given(data=st.data())
def test_any_json_in_any_place_of_a_deep_request_gives_a_body_or_a_refusal(pair, data):
    make, body = PAIRS[pair]
    json.dumps(make().request_body(body))  # the body as it is translates
    at = data.draw(st.sampled_from(json_places(body, added="type")[1:]))  # a place inside the body
    try:
        translated = make().request_body(json_replaced(body, at, data.draw(VALUES)))
    except TranslationRefused as refused:
        assert refused.param
    else:
        json.dumps(translated)
