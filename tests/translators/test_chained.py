"""translators.chained: `/v1/responses` on a Messages upstream, through Chat Completions as the hub.
Anthropic's documented answer and stream, read back by the official `openai` SDK's Responses
stream (its HTTP transport replaced by httpx's MockTransport); the usage kept whole for billing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from translators import TranslatedCall, TranslatedTokens, TranslationRefused
from translators.chained import Chained
from translators.chat_via_gemini import ChatViaGemini
from translators.chat_via_messages import ChatViaMessages
from translators.messages_via_chat import MessagesViaChat
from translators.responses_via_chat import ResponsesViaChat

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
USAGE = {
    "input_tokens": 40,
    "cache_read_input_tokens": 100,
    "cache_creation_input_tokens": 20,
    "output_tokens": 30,
}


def translator() -> Chained:
    call = TranslatedCall(
        "codex-on-claude", "claude-sonnet-4-5", "anthropic", max_tokens=2048, created=1700000000
    )
    return Chained(ResponsesViaChat, ChatViaMessages, call)


def test_a_responses_body_reaches_messages_through_the_hub():
    sent = translator().request_body(
        {
            "instructions": "Be terse.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city":"Oslo"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "12C"},
            ],
            "tools": [WEATHER],
            "max_output_tokens": 300,
            "store": False,
            "stream": True,
        }
    )
    assert sent == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 300,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "12C"}]},
        ],
        "system": "Be terse.",
        "tools": [{"name": "get_weather", "input_schema": WEATHER["parameters"]}],
        "stream": True,
    }


def test_a_message_comes_back_as_a_response_and_the_usage_keeps_its_cache_writes():
    step = translator()
    step.request_body({"input": "x"})
    response = step.response_body(
        {
            "id": "msg_1",
            "content": [{"type": "text", "text": "Hello"}],
            "stop_reason": "end_turn",
            "usage": USAGE,
        }
    )
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["output"][0]["content"][0]["text"] == "Hello"
    assert response["usage"]["input_tokens"] == 160 and response["usage"]["input_tokens_details"] == {
        "cached_tokens": 100
    }
    assert step.tokens == TranslatedTokens(input=40, cached=100, cache_write=20, output=30)


def event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


STREAM = [
    event("message_start", message={"id": "msg_2", "content": [], "usage": {**USAGE, "output_tokens": 1}}),
    event("ping"),
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Let me check."}),
    event("content_block_stop", index=0),
    event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
    ),
    event(
        "content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '{"city": "Oslo"}'}
    ),
    event("content_block_stop", index=1),
    event("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 30}),
    event("message_stop"),
]


def test_the_official_openai_sdk_assembles_a_messages_stream_as_a_responses_stream():
    step = translator()
    step.request_body({"input": "x", "stream": True, "tools": [WEATHER]})
    raw = b"".join(step.stream_event(piece) for piece in STREAM) + step.stream_end()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = openai.OpenAI(
        api_key="k",
        base_url="http://gateway.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with client.responses.stream(model="codex-on-claude", input="x") as events:
        for _ in events:
            pass
        final = events.get_final_response()
    assert final.output_text == "Let me check."
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, json.loads(c.arguments)) for c in calls] == [("toolu_1", {"city": "Oslo"})]
    assert final.usage.output_tokens == 30
    assert step.tokens == TranslatedTokens(input=40, cached=100, cache_write=20, output=30)


def test_an_anthropic_error_reaches_the_caller_in_the_compatible_shape():
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert json.loads(translator().error_body(529, body)) == {
        "error": {"message": "Overloaded", "type": "server_error", "param": None, "code": None}
    }


def on_gemini(outer: type) -> Chained:
    call = TranslatedCall(
        "agent-on-gemini", "gemini-2.5-flash", "gemini", max_tokens=2048, created=1700000000
    )
    return Chained(outer, ChatViaGemini, call)


def test_a_messages_body_reaches_gemini_through_the_hub():
    sent = on_gemini(MessagesViaChat).request_body(
        {
            "system": "Be terse.",
            "max_tokens": 300,
            "tools": [{"name": "get_weather", "input_schema": WEATHER["parameters"]}],
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "get_weather",
                            "input": {"city": "Oslo"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12C"}],
                },
            ],
        }
    )
    assert sent == {
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"id": "toolu_1", "name": "get_weather", "args": {"city": "Oslo"}}}
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "toolu_1",
                            "name": "get_weather",
                            "response": {"content": "12C"},
                        }
                    }
                ],
            },
        ],
        "systemInstruction": {"parts": [{"text": "Be terse."}]},
        "generationConfig": {"maxOutputTokens": 300},
        "tools": [
            {"functionDeclarations": [{"name": "get_weather", "parametersJsonSchema": WEATHER["parameters"]}]}
        ],
    }


GEMINI_STREAM = [
    json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me "}]}}]}),
    json.dumps(
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"text": "check."},
                            {"functionCall": {"id": "c1", "name": "get_weather", "args": {"city": "Oslo"}}},
                        ],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 40,
                "cachedContentTokenCount": 10,
                "candidatesTokenCount": 12,
                "thoughtsTokenCount": 3,
            },
        }
    ),
]


def test_a_gemini_stream_comes_back_as_a_messages_stream_the_anthropic_sdk_assembles():
    import anthropic
    import httpx2

    step = on_gemini(MessagesViaChat)
    step.request_body({"max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "x"}]})
    raw = b"".join(step.stream_event(piece) for piece in GEMINI_STREAM) + step.stream_end()

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = anthropic.Anthropic(
        api_key="k",
        base_url="http://gateway.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    with client.messages.stream(
        model="agent-on-gemini", max_tokens=100, messages=[{"role": "user", "content": "x"}]
    ) as events:
        message = events.get_final_message()
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Let me check."
    assert (message.content[1].id, message.content[1].input) == ("c1", {"city": "Oslo"})
    assert message.stop_reason == "tool_use"
    assert step.tokens == TranslatedTokens(input=30, cached=10, output=15, reasoning=3)


def test_a_gemini_answer_comes_back_as_a_response():
    step = on_gemini(ResponsesViaChat)
    step.request_body({"input": "x"})
    response = step.response_body(json.loads(GEMINI_STREAM[1]))
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][1]["call_id"] == "c1" and response["usage"]["input_tokens"] == 40


CORPUS = Path(__file__).resolve().parents[1] / "clients" / "corpus"
RECORDED = [e["file"] for e in json.loads((CORPUS / "index.json").read_text())]


@pytest.mark.parametrize("name", [n for n in RECORDED if n.endswith(("-messages.json", "-responses.json"))])
def test_every_recorded_body_goes_through_each_hub_pair(name):
    """The recorded Messages bodies on Gemini, the Responses bodies on Anthropic and on Gemini (Codex's
    are refused naming its web search tool, which only OpenAI runs)."""
    body = json.loads((CORPUS / name).read_text())
    if name.endswith("-messages.json"):
        pairs = [on_gemini(MessagesViaChat)]
    else:
        pairs = [translator(), on_gemini(ResponsesViaChat)]
    for pair in pairs:
        if name.startswith("codex"):
            with pytest.raises(TranslationRefused):
                pair.request_body(body)
            continue
        sent = pair.request_body(body)
        assert sent.get("messages") or sent.get("contents")


def test_a_responses_callers_pdf_reaches_claude_as_a_document_and_gemini_inline():
    part = {"type": "input_file", "filename": "spec.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}
    body = {
        "model": "m",
        "input": [{"role": "user", "content": [part, {"type": "input_text", "text": "Sum up"}]}],
    }
    claude = Chained(ResponsesViaChat, ChatViaMessages, TranslatedCall("m", "claude", "anthropic", 100, 0))
    assert claude.request_body(body)["messages"][0]["content"][0] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"},
        "title": "spec.pdf",
    }
    gemini = Chained(ResponsesViaChat, ChatViaGemini, TranslatedCall("m", "gemini-3-pro", "gemini", 100, 0))
    assert gemini.request_body(body)["contents"][0]["parts"][0] == {
        "inlineData": {"mimeType": "application/pdf", "data": "JVBERi0x"}
    }
