"""translators.messages_via_chat: an Anthropic Messages caller on a Chat Completions upstream.

Tables of (input, expected output) after the providers' documented examples, whole and streamed; the
translated stream read back by the official `anthropic` SDK (its HTTP transport replaced by httpx2's
MockTransport, the SDK's own boundary); any JSON anywhere gives a body or a TranslationRefused.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from translators import TranslatedCall, TranslatedTokens, TranslationRefused
from translators.messages_via_chat import MessagesViaChat

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a given location",
    "input_schema": {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "The city and state"}},
        "required": ["location"],
    },
}
WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": WEATHER_TOOL["input_schema"],
        "description": "Get the current weather in a given location",
    },
}


def translator(*, openai: bool = False) -> MessagesViaChat:
    kind = "openai" if openai else "openai-compatible"
    return MessagesViaChat(
        TranslatedCall("claude-via-chat", "deepseek-chat", kind, max_tokens=4096, created=0)
    )


REQUESTS = [
    pytest.param(
        {"model": "m", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hello, world"}]},
        {
            "model": "deepseek-chat",
            "messages": [{"role": "user", "content": "Hello, world"}],
            "max_tokens": 1024,
        },
        id="the basic example",
    ),
    pytest.param(
        {
            "model": "m",
            "max_tokens": 64,
            "system": [
                {"type": "text", "text": "You are terse."},
                {"type": "text", "text": "Answer in French.", "cache_control": {"type": "ephemeral"}},
            ],
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Bonjour"}]},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "And?", "cache_control": {"type": "ephemeral"}}],
                },
            ],
            "temperature": 0.2,
            "top_p": 0.9,
            "top_k": 5,
            "stop_sequences": ["\n\nHuman:"],
            "metadata": {"user_id": "user_session_1"},
        },
        {
            "model": "deepseek-chat",
            "messages": [
                {"role": "system", "content": "You are terse.\nAnswer in French."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Bonjour"},
                {"role": "user", "content": "And?"},
            ],
            "max_tokens": 64,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop": ["\n\nHuman:"],
            "user": "user_session_1",
        },
        id="system blocks, history, sampling, stop and user; cache_control and top_k dropped",
    ),
    pytest.param(
        {
            "model": "m",
            "max_tokens": 1024,
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": "What's the weather like in San Francisco?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Look it up.", "signature": "EqQBCgIYAhIM"},
                        {"type": "text", "text": "I'll check."},
                        {
                            "type": "tool_use",
                            "id": "toolu_01A09q90qw90lq917835lq9",
                            "name": "get_weather",
                            "input": {"location": "San Francisco, CA"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                            "content": "15 degrees",
                        },
                        {"type": "text", "text": "Thanks"},
                    ],
                },
            ],
        },
        {
            "model": "deepseek-chat",
            "messages": [
                {"role": "user", "content": "What's the weather like in San Francisco?"},
                {
                    "role": "assistant",
                    "content": "I'll check.",
                    "tool_calls": [
                        {
                            "id": "toolu_01A09q90qw90lq917835lq9",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{"location":"San Francisco, CA"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"},
                {"role": "user", "content": "Thanks"},
            ],
            "max_tokens": 1024,
            "tools": [WEATHER_FUNCTION],
            "tool_choice": "required",
            "parallel_tool_calls": False,
        },
        id="tools, any, a call and its result with the same id; thinking in the history dropped",
    ),
    pytest.param(
        {
            "model": "m",
            "max_tokens": 10,
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "tool", "name": "get_weather"},
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
                        },
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                        {"type": "text", "text": "Describe these."},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_1",
                            "is_error": True,
                            "content": [{"type": "text", "text": "timeout"}],
                        }
                    ],
                },
            ],
            "stream": True,
        },
        {
            "model": "deepseek-chat",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                        {"type": "text", "text": "Describe these."},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "Error: timeout"},
            ],
            "max_tokens": 10,
            "tools": [WEATHER_FUNCTION],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        id="images by base64 and URL, a named tool, an error result, a stream that asks for usage",
    ),
    pytest.param(
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {"role": "user", "content": "Compare the two screenshots."},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "call_1", "name": "Read", "input": {"file_path": "a.png"}},
                        {"type": "tool_use", "id": "call_2", "name": "Read", "input": {"file_path": "b.png"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_1",
                            "content": [
                                {"type": "text", "text": "a.png, 2 KB"},
                                {
                                    "type": "image",
                                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORa"},
                                },
                            ],
                        },
                        {
                            "type": "tool_result",
                            "tool_use_id": "call_2",
                            "content": [
                                {
                                    "type": "image",
                                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORb"},
                                }
                            ],
                        },
                        {"type": "text", "text": "Which is newer?"},
                    ],
                },
            ],
        },
        {
            "model": "deepseek-chat",
            "messages": [
                {"role": "user", "content": "Compare the two screenshots."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "Read", "arguments": '{"file_path":"a.png"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "Read", "arguments": '{"file_path":"b.png"}'},
                        },
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "call_1",
                    "content": "a.png, 2 KB\n[image: in the next message]",
                },
                {"role": "tool", "tool_call_id": "call_2", "content": "[image: in the next message]"},
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORa"}},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORb"}},
                        {"type": "text", "text": "Which is newer?"},
                    ],
                },
            ],
            "max_tokens": 10,
        },
        id="images a tool returned move to the user message after the tool messages (Claude Code's Read)",
    ),
]


@pytest.mark.parametrize(("body", "expected"), REQUESTS)
def test_it_translates_a_messages_request_into_chat_completions(body, expected):
    assert translator().request_body(body) == expected


@pytest.mark.parametrize(
    ("thinking", "effort"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, "low"),
        ({"type": "enabled", "budget_tokens": 10000}, "medium"),
        ({"type": "enabled", "budget_tokens": 32000}, "high"),
        ({"type": "adaptive"}, "medium"),
        ({"type": "disabled"}, None),
    ],
)
def test_thinking_becomes_a_reasoning_effort_for_openai_and_is_dropped_elsewhere(thinking, effort):
    body = {
        "model": "m",
        "max_tokens": 5,
        "thinking": thinking,
        "messages": [{"role": "user", "content": "x"}],
    }
    on_openai = translator(openai=True).request_body(body)
    assert on_openai.get("reasoning_effort") == effort
    assert on_openai["max_completion_tokens"] == 5 and "max_tokens" not in on_openai
    assert "reasoning_effort" not in translator().request_body(body)


@pytest.mark.parametrize(
    ("upstream_model", "effort"),
    [
        ("gpt-5.1", "medium"),
        ("o4-mini", "medium"),
        ("gpt-4.1", None),
        ("gpt-4o-2024-08-06", None),
        ("ft:gpt-4o-mini:acme::abc123", None),
        ("GPT-3.5-turbo", None),
        ("chatgpt-4o-latest", None),
    ],
)
def test_claude_codes_thinking_reaches_only_openai_models_that_reason(upstream_model, effort):
    """Claude Code asks every model for adaptive thinking; OpenAI's models that do not reason answer
    400 "Unsupported parameter: 'reasoning_effort' is not supported with this model"."""
    call = TranslatedCall("claude-via-gpt", upstream_model, "openai", max_tokens=4096, created=0)
    body = {"max_tokens": 5, "thinking": {"type": "adaptive"}, "messages": [{"role": "user", "content": "x"}]}
    assert MessagesViaChat(call).request_body(body).get("reasoning_effort") == effort


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("where", ["output_config", "output_format"])
def test_a_structured_output_schema_becomes_a_strict_response_format(where):
    fmt = {"type": "json_schema", "schema": SCHEMA}
    extra = (
        {"output_config": {"format": fmt, "effort": "high"}}
        if where == "output_config"
        else {"output_format": fmt}
    )
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], **extra}

    sent = translator(openai=True).request_body(body)

    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SCHEMA, "strict": True},
    }
    assert "output_config" not in sent and "output_format" not in sent and "effort" not in str(sent)


def test_claude_codes_effort_alone_asks_for_no_response_format():
    body = {
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "output_config": {"effort": "high"},
    }
    assert "response_format" not in translator().request_body(body)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "document", "source": {"type": "base64", "data": "JVBER"}}],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "tools": [WEATHER_TOOL, {"type": "web_search_20250305", "name": "web_search"}],
            },
            "tools[1]",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "system", "content": [{"type": "image"}]}]}, "messages[0].content[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]},
            "messages[0].content[0].source",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "system": [{"type": "image"}]}, "system[0]"),
        (
            {"messages": [{"role": "user", "content": "x"}], "output_config": {"format": {"type": "text"}}},
            "output_config.format.type",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "output_format": {"type": "json_schema"}},
            "output_format.schema",
        ),
    ],
)
def test_what_chat_completions_cannot_express_is_refused_naming_the_field(body, param):
    with pytest.raises(TranslationRefused) as refused:
        translator().request_body(body)
    assert refused.value.param == param


RESPONSES = [
    pytest.param(
        {
            "id": "chatcmpl-123",
            "object": "chat.completion",
            "created": 1677652288,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello there, how may I assist you today?"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 9,
                "completion_tokens": 12,
                "total_tokens": 21,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
        },
        [{"type": "text", "text": "Hello there, how may I assist you today?"}],
        "end_turn",
        TranslatedTokens(input=9, output=12),
        id="OpenAI's example answer",
    ),
    pytest.param(
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_abc123",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": '{"location": "Boston, MA"}',
                                },
                            },
                            {
                                "id": "call_def",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": "Paris"},
                            },
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {
                "prompt_tokens": 2048,
                "completion_tokens": 17,
                "prompt_tokens_details": {"cached_tokens": 1920},
            },
        },
        [
            {
                "type": "tool_use",
                "id": "call_abc123",
                "name": "get_weather",
                "input": {"location": "Boston, MA"},
            },
            {"type": "tool_use", "id": "call_def", "name": "get_weather", "input": {"arguments": "Paris"}},
        ],
        "tool_use",
        TranslatedTokens(input=128, cached=1920, output=17),
        id="parallel tool calls with cached prompt tokens",
    ),
    pytest.param(
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "reasoning_content": "9.11 < 9.8",
                        "content": "9.8 is larger",
                    },
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 13, "completion_tokens": 40},
        },
        [
            {"type": "thinking", "thinking": "9.11 < 9.8", "signature": ""},
            {"type": "text", "text": "9.8 is larger"},
        ],
        "max_tokens",
        TranslatedTokens(input=13, output=40),
        id="DeepSeek's reasoning_content, cut at the limit",
    ),
]


@pytest.mark.parametrize(("body", "content", "stop_reason", "tokens"), RESPONSES)
def test_it_translates_a_chat_completion_into_a_message(body, content, stop_reason, tokens):
    step = translator()
    message = step.response_body(body)
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["model"] == "claude-via-chat" and message["id"].startswith("msg_")
    assert message["content"] == content
    assert message["stop_reason"] == stop_reason
    assert step.tokens == tokens
    assert message["usage"] == {
        "input_tokens": tokens.input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": tokens.cached,
        "output_tokens": tokens.output,
    }


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict | None = None) -> str:
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "deepseek-chat"}
    body["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body)


TEXT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Think"}),
    chunk({"content": "Hello"}),
    chunk({"content": " world"}),
    chunk({}, finish="stop"),
    chunk(
        None,
        usage={"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 10}},
    ),
    "[DONE]",
]
TOOL_STREAM = [
    chunk({"role": "assistant", "content": "Checking."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"location":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_2",
                    "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'},
                }
            ]
        }
    ),
    chunk({}, finish="tool_calls"),
    chunk(None, usage={"prompt_tokens": 100, "completion_tokens": 20}),
    "[DONE]",
]


def events_of(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def stream(pieces: list[str]) -> tuple[MessagesViaChat, bytes]:
    step = translator()
    return step, b"".join(step.stream_event(piece) for piece in pieces)


def test_a_text_stream_becomes_the_messages_event_grammar():
    step, raw = stream(TEXT_STREAM)
    events = events_of(raw)
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[2][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert events[3][1]["delta"] == {"type": "thinking_delta", "thinking": "Think"}
    assert [e[1]["delta"]["text"] for e in events[6:8]] == ["Hello", " world"]
    assert events[6][1]["index"] == 1
    assert events[9][1]["delta"]["stop_reason"] == "end_turn"
    assert events[9][1]["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 10,
        "output_tokens": 5,
    }
    assert step.tokens == TranslatedTokens(input=20, cached=10, output=5)
    assert step.stream_event("[DONE]") == b"" and step.stream_end() == b""


def test_a_tool_call_stream_gives_input_json_deltas_per_call():
    step, raw = stream(TOOL_STREAM)
    events = events_of(raw)
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {}},
    ]
    pieces = [
        (data["index"], data["delta"]["partial_json"])
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    ]
    assert pieces == [(1, '{"location":'), (1, ' "Paris"}'), (2, '{"location": "Rome"}')]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert step.tokens == TranslatedTokens(input=100, output=20)


def sdk_reads(raw: bytes) -> anthropic.types.Message:
    """The translated stream as the official SDK assembles it."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = anthropic.Anthropic(
        api_key="k",
        base_url="http://gateway.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    with client.messages.stream(
        model="claude-via-chat", max_tokens=100, messages=[{"role": "user", "content": "x"}]
    ) as events:
        return events.get_final_message()


def test_the_official_sdk_assembles_the_translated_streams():
    message = sdk_reads(stream(TEXT_STREAM)[1])
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].text == "Hello world"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (20, 5)
    assert message.usage.cache_read_input_tokens == 10

    message = sdk_reads(stream(TOOL_STREAM)[1])
    assert message.stop_reason == "tool_use"
    calls = [(block.id, block.input) for block in message.content if block.type == "tool_use"]
    assert calls == [("call_1", {"location": "Paris"}), ("call_2", {"location": "Rome"})]


def test_a_stream_the_upstream_ends_without_done_is_closed_by_stream_end():
    step, raw = stream(TEXT_STREAM[:4])
    raw += step.stream_end()
    events = events_of(raw)
    assert [name for name, _ in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert step.tokens is None  # the upstream never reported its usage


def test_an_error_event_in_the_stream_becomes_the_messages_error_event():
    step, raw = stream(
        [chunk({"content": "Hi"}), json.dumps({"error": {"message": "overloaded", "type": "server_error"}})]
    )
    assert events_of(raw)[-1] == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": "overloaded"}},
    )
    assert step.stream_event(chunk({"content": "late"})) == b""


@pytest.mark.parametrize(
    ("status", "body", "expected_type", "message"),
    [
        (
            400,
            b'{"error": {"message": "Invalid model", "type": "invalid_request_error", "code": null}}',
            "invalid_request_error",
            "Invalid model",
        ),
        (
            401,
            b'{"error": {"message": "Incorrect API key provided"}}',
            "authentication_error",
            "Incorrect API key provided",
        ),
        (429, b'{"error": "Rate limit reached"}', "rate_limit_error", "Rate limit reached"),
        (500, b"<html>Internal Server Error</html>", "api_error", "<html>Internal Server Error</html>"),
        (503, b"", "overloaded_error", "The upstream answered 503."),
    ],
)
def test_an_upstream_error_keeps_its_message_in_the_messages_shape(status, body, expected_type, message):
    assert json.loads(translator().error_body(status, body)) == {
        "type": "error",
        "error": {"type": expected_type, "message": message},
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
FIELDS = [
    "messages",
    "system",
    "tools",
    "tool_choice",
    "max_tokens",
    "stop_sequences",
    "metadata",
    "thinking",
    "stream",
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(field=st.sampled_from(FIELDS), value=JSON, base=st.sampled_from([p.values[0] for p in REQUESTS]))
def test_any_json_in_any_request_field_gives_a_body_or_a_refusal(field, value, base):
    body = {**base, field: value}
    try:
        translated = translator().request_body(body)
    except TranslationRefused as refused:
        assert refused.param
    else:
        json.dumps(translated)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(value=JSON, at=st.sampled_from(["choices", "usage", "delta", "message", "tool_calls", "error"]))
def test_any_json_from_the_upstream_gives_the_caller_a_well_formed_answer(value, at):
    planted = {
        "choices": {"choices": value},
        "usage": {"choices": [], "usage": value},
        "delta": {"choices": [{"delta": value}]},
        "message": {"choices": [{"message": value}]},
        "tool_calls": {"choices": [{"delta": {"tool_calls": value}, "message": {"tool_calls": value}}]},
        "error": {"error": value},
    }[at]
    json.dumps(translator().response_body(planted))
    step = translator()
    raw = step.stream_event(json.dumps(planted)) + step.stream_end()
    for name, data in events_of(raw):
        assert data["type"] == name
    json.loads(translator().error_body(502, json.dumps(planted).encode()))


def test_the_translators_import_nothing_of_django_or_the_network():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, translators.messages_via_chat; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for module in ("django", "requests", "urllib3", "socket", "logging", "threading"):
        assert f"'{module}'" not in loaded, module


CORPUS = Path(__file__).resolve().parents[1] / "clients" / "corpus"
RECORDED = [
    entry["file"]
    for entry in json.loads((CORPUS / "index.json").read_text())
    if entry["file"].endswith("-messages.json")
]


@pytest.mark.parametrize("name", RECORDED)
def test_every_recorded_messages_body_translates(name):
    """The bodies Claude Code, the anthropic SDK and LangChain sent (tests/clients/corpus)."""
    body = json.loads((CORPUS / name).read_text())
    sent = translator().request_body(body)
    assert sent["model"] == "deepseek-chat"
    assert {m["role"] for m in sent["messages"]} <= {"system", "user", "assistant", "tool"}
    assert len(sent["messages"]) >= len([m for m in body["messages"] if m["role"] != "system"])


@pytest.mark.parametrize(
    "user_id",
    [
        '{"device_id":"'
        + "0" * 64
        + '","account_uuid":"","session_id":"0da04fc8-5a34-47e3-ba02-8ab4279c5796"}',
        "u" * 65,
        "\udfff" * 70,
    ],
    ids=["claude-code's", "65 characters", "lone surrogates"],
)
def test_a_user_id_longer_than_openai_takes_goes_as_its_digest(user_id):
    body = {
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"}],
        "metadata": {"user_id": user_id},
    }
    sent = translator().request_body(body)
    assert sent["user"] == hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()
    assert len(sent["user"]) == 64


def test_a_user_id_openai_takes_goes_as_it_is():
    body = {
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"}],
        "metadata": {"user_id": "u" * 64},
    }
    assert translator().request_body(body)["user"] == "u" * 64


@pytest.mark.parametrize(
    ("signature", "openai", "reasoning"),
    [
        ("", False, "Call it."),
        (None, False, "Call it."),
        ("EqQBCgIYAhIM", False, None),
        ("", True, None),
    ],
    ids=["unsigned", "no signature field", "signed by Anthropic", "to OpenAI itself"],
)
def test_unsigned_thinking_goes_back_to_a_compatible_server_as_reasoning_content(
    signature, openai, reasoning
):
    """What this translator made of a server's `reasoning_content` comes back as an unsigned thinking
    block; DeepSeek's thinking mode answers 400 to a tool call turn without it."""
    thinking = {"type": "thinking", "thinking": "Call it."}
    if signature is not None:
        thinking["signature"] = signature
    body = {
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [thinking, {"type": "tool_use", "id": "c1", "name": "w", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "12C"}]},
        ],
    }
    assistant = translator(openai=openai).request_body(body)["messages"][1]
    assert assistant.get("reasoning_content") == reasoning
    assert assistant["tool_calls"][0]["id"] == "c1"


PDF_BLOCK = {
    "type": "document",
    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"},
}
PDF_FILE = {
    "type": "file",
    "file": {"filename": "document.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"},
}


def claude_code_read_a_pdf() -> dict[str, Any]:
    """Claude Code's Read of a PDF: a tool result of a text line and the document (as 2.1.332 sends)."""
    return {
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "Summarise spec.pdf"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "Read", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [{"type": "text", "text": "PDF file read: spec.pdf (8 B)"}, PDF_BLOCK],
                    }
                ],
            },
        ],
    }


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_a_pdf_a_tool_returned_goes_as_a_file_in_the_next_user_message_where_it_is_read(kind):
    call = TranslatedCall("claude-via-gpt", "gpt-5.1", kind, max_tokens=4096, created=0)
    messages = MessagesViaChat(call).request_body(claude_code_read_a_pdf())["messages"]
    assert messages[2:] == [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "PDF file read: spec.pdf (8 B)\n[document: in the next message]",
        },
        {"role": "user", "content": [PDF_FILE]},
    ]


def test_a_pdf_a_tool_returned_is_a_line_for_a_server_that_reads_none():
    """An agent keeps the tool's result in its history: refusing it would refuse every later call."""
    messages = translator().request_body(claude_code_read_a_pdf())["messages"]
    assert messages[2:] == [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "PDF file read: spec.pdf (8 B)\n[a PDF document: this model cannot read documents]",
        }
    ]


def test_a_callers_own_pdf_goes_as_a_file_where_it_is_read_and_is_refused_elsewhere():
    body = {
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [PDF_BLOCK, {"type": "text", "text": "Sum up"}]}],
    }
    on_openai = translator(openai=True).request_body(body)["messages"]
    assert on_openai == [{"role": "user", "content": [PDF_FILE, {"type": "text", "text": "Sum up"}]}]
    with pytest.raises(TranslationRefused) as refused:
        translator().request_body(body)
    assert refused.value.param == "messages[0].content[0]"
