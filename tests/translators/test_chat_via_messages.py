"""translators.chat_via_messages: an OpenAI Chat Completions caller on an Anthropic Messages upstream.

Tables after the providers' documented examples, whole and streamed; the translated stream read back
by the official `openai` SDK (its HTTP transport replaced by httpx's MockTransport, the SDK's own
boundary); any JSON anywhere gives a body or a TranslationRefused; the recorded chat bodies of real
clients translate.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from translators import TranslatedCall, TranslatedTokens, TranslationRefused
from translators.chat_via_messages import ChatViaMessages

WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True,
    },
}
WEATHER_TOOL = {
    "name": "get_weather",
    "input_schema": WEATHER_FUNCTION["function"]["parameters"],
    "description": "Get the weather",
}


def translator() -> ChatViaMessages:
    return ChatViaMessages(
        TranslatedCall(
            "gpt-via-claude", "claude-sonnet-4-5", "anthropic", max_tokens=4096, created=1700000000
        )
    )


REQUESTS = [
    pytest.param(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Hello!"},
            ],
        },
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello!"}]}],
            "system": "Be brief.",
        },
        id="OpenAI's basic example: the developer message is the system prompt, the model's limit is sent",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "A"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What's in this image?"},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}],
                },
                {"role": "system", "content": [{"type": "text", "text": "B"}]},
            ],
            "max_completion_tokens": 300,
            "temperature": 1.5,
            "top_p": 0.9,
            "stop": "END",
            "user": "user-1",
            "seed": 7,
            "presence_penalty": 0.5,
            "stream_options": {"include_usage": True},
        },
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 300,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What's in this image?"},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
                        },
                    ],
                }
            ],
            "system": "A\n\nB",
            "temperature": 1,
            "stop_sequences": ["END"],
            "metadata": {"user_id": "user-1"},
        },
        id="images by URL and data URL, consecutive user turns merged, temperature capped, top_p dropped",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "Rome"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "18C"}]},
            ],
            "tools": [WEATHER_FUNCTION],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "max_tokens": 100,
        },
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "call_1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        },
                        {
                            "type": "tool_use",
                            "id": "call_2",
                            "name": "get_weather",
                            "input": {"arguments": "Rome"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "12C"},
                        {"type": "tool_result", "tool_use_id": "call_2", "content": "18C"},
                    ],
                },
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        },
        id="parallel calls and their results in one user turn, ids kept; required is any",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Give me a user"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "u",
                    "schema": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
            },
            "reasoning_effort": "high",
            "stream": True,
        },
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Give me a user"}]}],
            "tools": [
                {
                    "name": "json_output",
                    "description": "Give the answer as this JSON.",
                    "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
                }
            ],
            "tool_choice": {"type": "tool", "name": "json_output"},
            "stream": True,
        },
        id="a JSON schema as a forced tool; thinking dropped with a forced tool",
    ),
]


@pytest.mark.parametrize(("body", "expected"), REQUESTS)
def test_it_translates_a_chat_request_into_messages(body, expected):
    assert translator().request_body(body) == expected


@pytest.mark.parametrize(
    ("effort", "max_tokens", "thinking"),
    [
        ("low", 4000, 1024),
        ("medium", 20000, 8192),
        ("high", 30000, 24576),
        ("high", 10000, 9999),
        ("low", 1024, None),
    ],
)
def test_a_reasoning_effort_becomes_a_thinking_budget_under_the_limit(effort, max_tokens, thinking):
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "reasoning_effort": effort,
        "max_tokens": max_tokens,
        "temperature": 0.2,
    }
    sent = translator().request_body(body)
    if thinking is None:
        assert "thinking" not in sent and sent["temperature"] == 0.2
    else:
        assert sent["thinking"] == {"type": "enabled", "budget_tokens": thinking}
        assert "temperature" not in sent


CALLED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
ANSWERED = {"role": "tool", "tool_call_id": "call_1", "content": "12C"}


@pytest.mark.parametrize(
    ("history", "thinking"),
    [
        pytest.param([], True, id="no assistant turn yet"),
        pytest.param([CALLED, ANSWERED], False, id="the last assistant turn called a tool"),
        pytest.param(
            [CALLED, ANSWERED, {"role": "user", "content": "and more?"}], False, id="a turn after the result"
        ),
        pytest.param(
            [CALLED, ANSWERED, {"role": "assistant", "content": "12C."}, {"role": "user", "content": "ok"}],
            True,
            id="the loop ended in an answer",
        ),
    ],
)
def test_thinking_is_left_off_while_a_tool_loop_is_open(history, thinking):
    """Anthropic answers 400 to thinking when the last assistant turn called a tool and does not start
    with the signed thinking block it was given ("a final assistant message must start with a
    thinking block"); a Chat Completions history has no such block to give back."""
    body = {
        "messages": [{"role": "user", "content": "weather?"}, *history],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "reasoning_effort": "low",
        "max_tokens": 4000,
    }
    sent = translator().request_body(body)
    assert ("thinking" in sent) is thinking


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [], "n": 2}, "n"),
        ({"messages": [], "logprobs": True}, "logprobs"),
        ({"messages": [], "modalities": ["text", "audio"]}, "modalities"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
            "messages[0].content[0]",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]},
            "messages[0].content[0].file.file_data",
        ),
        ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "messages[0].role"),
        ({"messages": [], "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"messages": [], "response_format": {"type": "xml"}}, "response_format.type"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ],
)
def test_what_messages_cannot_express_is_refused_naming_the_field(body, param):
    with pytest.raises(TranslationRefused) as refused:
        translator().request_body(body)
    assert refused.value.param == param


ANTHROPIC_ANSWER = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "thinking", "thinking": "The user wants weather.", "signature": "EqQBCg"},
        {"type": "text", "text": "I'll check."},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 472,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 50,
        "output_tokens": 89,
    },
}


def test_it_translates_a_message_into_a_chat_completion():
    step = translator()
    answer = step.response_body(ANTHROPIC_ANSWER)
    assert answer["id"] == "chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL"
    assert (answer["object"], answer["created"], answer["model"]) == (
        "chat.completion",
        1700000000,
        "gpt-via-claude",
    )
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "I'll check.",
                "reasoning_content": "The user wants weather.",
                "tool_calls": [
                    {
                        "id": "toolu_01A",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
            "logprobs": None,
        }
    ]
    assert answer["usage"] == {
        "prompt_tokens": 1522,
        "completion_tokens": 89,
        "total_tokens": 1611,
        "prompt_tokens_details": {"cached_tokens": 1000},
    }
    assert step.tokens == TranslatedTokens(input=472, cached=1000, cache_write=50, output=89)


def test_a_forced_json_answer_comes_back_as_the_content():
    step = translator()
    step.request_body(
        {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}
    )
    answer = step.response_body(
        {
            "content": [{"type": "tool_use", "id": "t", "name": "json_output", "input": {"name": "Ada"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 7},
        }
    )
    choice = answer["choices"][0]
    assert json.loads(choice["message"]["content"]) == {"name": "Ada"}
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"


def event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


STREAM = [
    event(
        "message_start",
        message={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "usage": {"input_tokens": 25, "cache_read_input_tokens": 10, "output_tokens": 1},
        },
    ),
    event("ping"),
    event(
        "content_block_start", index=0, content_block={"type": "thinking", "thinking": "", "signature": ""}
    ),
    event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Hmm"}),
    event("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "Eq"}),
    event("content_block_stop", index=0),
    event("content_block_start", index=1, content_block={"type": "text", "text": ""}),
    event("content_block_delta", index=1, delta={"type": "text_delta", "text": "Hello"}),
    event("content_block_delta", index=1, delta={"type": "text_delta", "text": "!"}),
    event("content_block_stop", index=1),
    event(
        "content_block_start",
        index=2,
        content_block={"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}},
    ),
    event("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '{"city": '}),
    event("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '"Oslo"}'}),
    event("content_block_stop", index=2),
    event(
        "message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None}, usage={"output_tokens": 15}
    ),
    event("message_stop"),
]


def chunks_of(raw: bytes) -> list[Any]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream(*, usage: bool) -> tuple[ChatViaMessages, bytes]:
    step = translator()
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    step.request_body(body)
    return step, b"".join(step.stream_event(piece) for piece in STREAM)


def test_a_messages_stream_becomes_chat_chunks_with_usage_when_asked():
    step, raw = stream(usage=True)
    chunks = chunks_of(raw)
    assert chunks[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert [d.get("reasoning_content") for d in deltas if "reasoning_content" in d] == ["Hmm"]
    assert "".join(d.get("content") or "" for d in deltas) == "Hello!"
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0] == {
        "index": 0,
        "id": "toolu_9",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Oslo"}'
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-2]["choices"] == []
    assert chunks[-2]["usage"] == {
        "prompt_tokens": 35,
        "completion_tokens": 15,
        "total_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 10},
    }
    assert {c["id"] for c in chunks[:-1]} == {"chatcmpl-msg_1"}
    assert step.tokens == TranslatedTokens(input=25, cached=10, output=15)


def test_the_usage_chunk_is_left_out_unless_asked_for():
    _, raw = stream(usage=False)
    chunks = chunks_of(raw)
    assert chunks[-1] == "[DONE]" and all(c["choices"] for c in chunks[:-1])


def test_the_official_openai_sdk_assembles_the_translated_stream():
    _, raw = stream(usage=True)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = openai.OpenAI(
        api_key="k",
        base_url="http://gateway.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with client.chat.completions.stream(
        model="gpt-via-claude", messages=[{"role": "user", "content": "x"}]
    ) as events:
        for _ in events:
            pass
        final = events.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Hello!"
    assert message.tool_calls[0].function.name == "get_weather"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage.prompt_tokens == 35 and final.usage.completion_tokens == 15


def test_an_error_event_becomes_the_chat_error_chunk_and_ends_the_stream():
    step = translator()
    raw = step.stream_event(STREAM[0]) + step.stream_event(
        event("error", error={"type": "overloaded_error", "message": "Overloaded"})
    )
    assert chunks_of(raw)[-1] == {
        "error": {"message": "Overloaded", "type": "server_error", "param": None, "code": None}
    }
    assert step.stream_event(STREAM[-1]) == b"" and step.stream_end() == b""


@pytest.mark.parametrize(
    ("status", "body", "expected_type", "message"),
    [
        (
            400,
            b'{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}',
            "invalid_request_error",
            "max_tokens: too large",
        ),
        (
            429,
            b'{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}',
            "rate_limit_error",
            "Slow down",
        ),
        (529, b"overloaded", "server_error", "overloaded"),
    ],
)
def test_an_upstream_error_keeps_its_message_in_the_chat_shape(status, body, expected_type, message):
    assert json.loads(translator().error_body(status, body)) == {
        "error": {"message": message, "type": expected_type, "param": None, "code": None}
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
FIELDS = [
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "stop",
    "response_format",
    "reasoning_effort",
    "n",
    "user",
    "parallel_tool_calls",
    "temperature",
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(field=st.sampled_from(FIELDS), value=JSON, base=st.sampled_from([p.values[0] for p in REQUESTS]))
def test_any_json_in_any_request_field_gives_a_body_or_a_refusal(field, value, base):
    try:
        json.dumps(translator().request_body({**base, field: value}))
    except TranslationRefused as refused:
        assert refused.param


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(value=JSON, at=st.sampled_from(["content", "usage", "message", "delta", "block", "error"]))
def test_any_json_from_the_upstream_gives_the_caller_well_formed_chunks(value, at):
    planted = {
        "content": {"content": value},
        "usage": {"type": "message_delta", "usage": value},
        "message": {"type": "message_start", "message": value},
        "delta": {"type": "content_block_delta", "index": 0, "delta": value},
        "block": {"type": "content_block_start", "index": 0, "content_block": value},
        "error": {"type": "error", "error": value},
    }[at]
    json.dumps(translator().response_body(planted))
    step = translator()
    raw = step.stream_event(json.dumps(planted)) + step.stream_end()
    for chunk in chunks_of(raw):
        assert chunk == "[DONE]" or "choices" in chunk or "error" in chunk


CORPUS = Path(__file__).resolve().parents[1] / "clients" / "corpus"
RECORDED = [
    e["file"] for e in json.loads((CORPUS / "index.json").read_text()) if e["file"].endswith("-chat.json")
]


@pytest.mark.parametrize("name", RECORDED)
def test_every_recorded_chat_body_translates(name):
    """The bodies the openai SDK, LangChain and the OpenAI Agents SDK sent (tests/clients/corpus)."""
    body = json.loads((CORPUS / name).read_text())
    sent = translator().request_body(body)
    assert sent["model"] == "claude-sonnet-4-5" and sent["messages"]
    roles = [turn["role"] for turn in sent["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))  # alternating, as Messages wants


@pytest.mark.parametrize(
    ("sampling", "sent"),
    [
        ({"temperature": 0.2, "top_p": 0.9}, {"temperature": 0.2}),
        ({"top_p": 0.9}, {"top_p": 0.9}),
        ({"temperature": 0.2}, {"temperature": 0.2}),
    ],
)
def test_top_p_goes_only_without_temperature(sampling, sent):
    """Claude 4.5 and later answer 400 "`temperature` and `top_p` cannot both be specified for this
    model"; the temperature is the one kept."""
    out = translator().request_body({"messages": [{"role": "user", "content": "x"}], **sampling})
    assert {key: out[key] for key in ("temperature", "top_p") if key in out} == sent


def test_a_pdf_given_by_its_bytes_is_a_document_block():
    pdf = {
        "type": "file",
        "file": {"filename": "spec.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"},
    }
    body = {"messages": [{"role": "user", "content": [pdf, {"type": "text", "text": "Sum up"}]}]}
    assert translator().request_body(body)["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"},
                    "title": "spec.pdf",
                },
                {"type": "text", "text": "Sum up"},
            ],
        }
    ]
