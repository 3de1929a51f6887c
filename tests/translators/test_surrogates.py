"""Half of a surrogate pair in an upstream's text (JSON allows it as a `\\udXXX` escape) is written
to the caller as the same JSON string, never an exception: it has no UTF-8, so the translated JSON
escapes it. The gateway's fuzz of upstream answers found this 500 on every translated endpoint."""

from __future__ import annotations

import json

import pytest

from translators import TranslatedCall
from translators.chat_via_gemini import ChatViaGemini
from translators.chat_via_messages import ChatViaMessages
from translators.messages_via_chat import MessagesViaChat
from translators.responses_via_chat import ResponsesViaChat
from translators.values import json_bytes

CALL = TranslatedCall("m", "u", "openai-compatible", max_tokens=10, created=0)
HALF = "a\ud800b"


def test_json_bytes_writes_utf8_and_escapes_only_when_a_string_has_no_utf8():
    assert json_bytes({"text": "猫 é"}) == '{"text":"猫 é"}'.encode()
    written = json_bytes({"text": HALF, "other": "猫"})
    assert written == b'{"text":"a\\ud800b","other":"\\u732b"}'
    assert json.loads(written) == {"text": HALF, "other": "猫"}


def chat_chunk(content: str) -> str:
    return json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": content}}]})


STREAMS = {
    "chat via messages": (
        ChatViaMessages,
        [
            json.dumps({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}),
            json.dumps(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            ),
            json.dumps(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": HALF}}
            ),
        ],
    ),
    "chat via gemini": (
        ChatViaGemini,
        [json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": HALF}]}}]})],
    ),
    "messages via chat": (MessagesViaChat, [chat_chunk(HALF)]),
    "responses via chat": (ResponsesViaChat, [chat_chunk(HALF)]),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_streamed_text_holding_half_a_surrogate_pair_reaches_the_caller_escaped(name):
    translator, events = STREAMS[name]
    step = translator(CALL)
    step.request_body({"messages": [{"role": "user", "content": "x"}], "input": "x", "stream": True})

    raw = b"".join(step.stream_event(event) for event in events)

    text = raw.decode("utf-8")  # strict: every byte written is UTF-8
    assert "\\ud800" in text
    assert any(HALF in line for line in _decoded_strings(text))


def _decoded_strings(text: str) -> list[str]:
    """Every string in the JSON of the stream's data lines."""
    found: list[str] = []

    def walk(value):
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for line in text.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            walk(json.loads(line.removeprefix("data: ")))
    return found


@pytest.mark.parametrize(
    ("translator", "answer"),
    [
        (ChatViaMessages, {"content": [{"type": "text", "text": HALF}], "usage": {"input_tokens": 1}}),
        (ChatViaGemini, {"candidates": [{"content": {"parts": [{"text": HALF}]}}]}),
        (MessagesViaChat, {"choices": [{"message": {"role": "assistant", "content": HALF}}]}),
        (ResponsesViaChat, {"choices": [{"message": {"role": "assistant", "content": HALF}}]}),
    ],
    ids=["chat via messages", "chat via gemini", "messages via chat", "responses via chat"],
)
def test_a_whole_answer_holding_half_a_surrogate_pair_is_written_escaped(translator, answer):
    step = translator(CALL)
    step.request_body({"messages": [{"role": "user", "content": "x"}], "input": "x"})

    written = json_bytes(step.response_body(answer))

    assert HALF in _decoded_strings("data: " + written.decode("utf-8"))
