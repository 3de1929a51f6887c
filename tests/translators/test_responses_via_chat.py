"""translators.responses_via_chat: an OpenAI Responses caller on a Chat Completions upstream.

Tables after the documented examples, whole and streamed; the translated stream read back by the
official `openai` SDK (its HTTP transport replaced by httpx's MockTransport, the SDK's own
boundary); any JSON anywhere gives a body or a TranslationRefused; the recorded Responses bodies of
real clients translate, or are refused naming the server tool Codex sends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from translators import TranslatedCall, TranslatedTokens, TranslationRefused
from translators.responses_via_chat import ResponsesViaChat

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
WEATHER_FUNCTION = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": WEATHER["parameters"],
        "description": WEATHER["description"],
    },
}


def translator(kind: str = "openai-compatible") -> ResponsesViaChat:
    return ResponsesViaChat(
        TranslatedCall("agent-model", "deepseek-chat", kind, max_tokens=4096, created=1700000000)
    )


REQUESTS = [
    pytest.param(
        {"model": "m", "input": "Tell me a three sentence bedtime story about a unicorn."},
        {
            "model": "deepseek-chat",
            "messages": [
                {"role": "user", "content": "Tell me a three sentence bedtime story about a unicorn."}
            ],
        },
        id="OpenAI's basic example",
    ),
    pytest.param(
        {
            "model": "m",
            "instructions": "You are a terse weather assistant.",
            "input": [
                {"content": "What is the weather in Paris?", "role": "user"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                    "status": "completed",
                },
                {
                    "type": "function_call",
                    "id": "fc_2",
                    "call_id": "call_2",
                    "name": "get_weather",
                    "arguments": '{"city": "Rome"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "12C"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "18C"}],
                },
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "Be brief."}],
                },
            ],
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "max_output_tokens": 512,
            "temperature": 0.3,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low", "summary": "auto"},
            "prompt_cache_key": "k",
            "client_metadata": {"a": "b"},
            "stream": True,
        },
        {
            "model": "deepseek-chat",
            "messages": [
                {"role": "system", "content": "You are a terse weather assistant."},
                {"role": "user", "content": "What is the weather in Paris?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
                {"role": "tool", "tool_call_id": "call_2", "content": "18C"},
                {"role": "system", "content": "Be brief."},
            ],
            "max_tokens": 512,
            "temperature": 0.3,
            "parallel_tool_calls": False,
            "tools": [WEATHER_FUNCTION],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        id="instructions, calls merged into one assistant turn, their outputs, hints dropped",
    ),
    pytest.param(
        {
            "model": "m",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "low"},
                    ],
                }
            ],
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "answer",
                    "schema": {"type": "object"},
                    "strict": True,
                },
                "verbosity": "low",
            },
            "tools": [{"type": "namespace", "name": "ns", "tools": [WEATHER]}],
        },
        {
            "model": "deepseek-chat",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,iVBOR", "detail": "low"},
                        },
                    ],
                }
            ],
            "tools": [WEATHER_FUNCTION],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
            },
        },
        id="an image, a JSON schema, a namespace of functions flattened",
    ),
    pytest.param(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "What is in shot.png?"}]},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "view_image",
                    "arguments": '{"path":"shot.png"}',
                },
                {
                    "type": "function_call",
                    "call_id": "call_2",
                    "name": "shell",
                    "arguments": '{"command":["ls"]}',
                },
                {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": [{"type": "input_image", "image_url": "data:image/png;base64,iVBOR"}],
                },
                {"type": "function_call_output", "call_id": "call_2", "output": "shot.png"},
                {"role": "user", "content": [{"type": "input_text", "text": "And now?"}]},
            ],
        },
        {
            "model": "deepseek-chat",
            "messages": [
                {"role": "user", "content": "What is in shot.png?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "view_image", "arguments": '{"path":"shot.png"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "shell", "arguments": '{"command":["ls"]}'},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "[image: in the next message]"},
                {"role": "tool", "tool_call_id": "call_2", "content": "shot.png"},
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}],
                },
                {"role": "user", "content": "And now?"},
            ],
        },
        id="an image a call returned (Codex's view_image) in a user message after the tool messages",
    ),
]


@pytest.mark.parametrize(("body", "expected"), REQUESTS)
def test_it_translates_a_responses_request_into_chat_completions(body, expected):
    assert translator().request_body(body) == expected


def test_openai_itself_gets_max_completion_tokens():
    assert (
        translator("openai").request_body({"input": "x", "max_output_tokens": 9})["max_completion_tokens"]
        == 9
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
        ({"input": "x", "background": True}, "background"),
        (
            {"input": "x", "tools": [WEATHER, {"type": "web_search", "external_web_access": False}]},
            "tools[1]",
        ),
        ({"input": "x", "tools": [{"type": "custom", "name": "apply_patch"}]}, "tools[0]"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0]",
        ),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0]"),
        ({"input": 5}, "input"),
    ],
)
def test_what_only_the_responses_api_can_do_is_refused_naming_the_field(body, param):
    with pytest.raises(TranslationRefused) as refused:
        translator().request_body(body)
    assert refused.value.param == param


CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "choices": [
        {
            "message": {
                "role": "assistant",
                "reasoning_content": "Think.",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_7",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 20}},
}


def test_it_translates_a_chat_completion_into_a_response():
    step = translator()
    step.request_body({"input": "x", "tools": [WEATHER], "instructions": "Terse."})
    response = step.response_body(CHAT_ANSWER)
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["id"].startswith("resp_") and response["model"] == "agent-model"
    assert [item["type"] for item in response["output"]] == ["reasoning", "message", "function_call"]
    assert response["output"][0]["summary"] == [{"type": "summary_text", "text": "Think."}]
    assert response["output"][1]["content"] == [
        {"type": "output_text", "text": "Checking.", "annotations": []}
    ]
    call = response["output"][2]
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_7", "get_weather", '{"city":"Oslo"}')
    assert response["usage"]["input_tokens"] == 120 and response["usage"]["input_tokens_details"] == {
        "cached_tokens": 20
    }
    assert response["instructions"] == "Terse." and response["tools"] == [WEATHER]
    assert step.tokens == TranslatedTokens(input=100, cached=20, output=30)


def test_each_item_of_a_whole_answer_has_its_own_id_and_is_given_to_be_kept():
    """Two tool calls of one answer had the same id; the gateway keeps each item by its id."""
    step = translator()
    step.request_body({"input": "x"})
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        for n in (1, 2)
    ]
    answer = {
        "choices": [{"message": {"content": "Both.", "tool_calls": calls}, "finish_reason": "tool_calls"}]
    }

    response = step.response_body(answer)

    ids = [item["id"] for item in response["output"]]
    assert len(ids) == len(set(ids)) == 3
    kept = step.responses_answer
    assert kept is not None and kept.response_id == response["id"] and list(kept.items) == response["output"]
    assert kept.response == response


def test_a_streams_items_are_given_to_be_kept_as_the_final_response_lists_them():
    step, raw = stream()
    completed = events_of(raw)[-1][1]["response"]
    kept = step.responses_answer
    assert kept is not None and kept.response_id == completed["id"] and kept.response == completed
    assert completed["output"] and list(kept.items) == completed["output"]


def test_previous_response_id_and_store_are_echoed_in_the_answer():
    step = translator()
    sent = step.request_body({"input": "x", "previous_response_id": "resp_1", "store": False})
    assert "previous_response_id" not in sent and "store" not in sent

    response = step.response_body({"choices": [{"message": {"content": "y"}, "finish_reason": "stop"}]})

    assert response["previous_response_id"] == "resp_1" and response["store"] is False
    alone = translator()
    alone.request_body({"input": "x"})
    assert alone.response_body({})["previous_response_id"] is None


def test_reasoning_tokens_the_chat_upstream_reports_reach_the_response_usage():
    step = translator()
    step.request_body({"input": "x", "reasoning": {"effort": "high"}})
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 50,
        "completion_tokens_details": {"reasoning_tokens": 42},
    }
    answer = {**CHAT_ANSWER, "usage": usage}

    response = step.response_body(answer)

    assert response["usage"]["output_tokens"] == 50
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": 42}
    assert step.tokens == TranslatedTokens(input=10, output=50, reasoning=42)


def test_reported_reasoning_tokens_beyond_the_output_are_cut_to_it():
    step = translator()
    step.request_body({"input": "x"})
    usage = {"prompt_tokens": 1, "completion_tokens": 3, "completion_tokens_details": {"reasoning_tokens": 9}}

    response = step.response_body({**CHAT_ANSWER, "usage": usage})

    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": 3}


def test_an_answer_cut_at_the_limit_is_an_incomplete_response():
    step = translator()
    step.request_body({"input": "x", "max_output_tokens": 5})
    response = step.response_body(
        {"choices": [{"message": {"content": "Once upon"}, "finish_reason": "length"}]}
    )
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict | None = None) -> str:
    body: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "choices": []}
    if delta is not None:
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body)


STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Hmm"}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
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
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
    chunk({}, finish="tool_calls"),
    chunk(usage={"prompt_tokens": 50, "completion_tokens": 12}),
    "[DONE]",
]


def events_of(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n", 1)
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def stream() -> tuple[ResponsesViaChat, bytes]:
    step = translator()
    step.request_body({"input": "x", "stream": True, "tools": [WEATHER]})
    return step, b"".join(step.stream_event(piece) for piece in STREAM)


def test_a_chat_stream_becomes_the_responses_event_grammar():
    step, raw = stream()
    events = events_of(raw)
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(data["type"] == name for name, data in events)
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    arguments = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert (text, arguments) == ("Hello", '{"city":"Oslo"}')
    assert names.count("response.output_item.added") == names.count("response.output_item.done") == 3
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["usage"]["input_tokens"] == 50 and final["usage"]["output_tokens"] == 12
    assert step.tokens == TranslatedTokens(input=50, output=12)


def test_the_official_openai_sdk_assembles_the_translated_stream():
    _, raw = stream()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = openai.OpenAI(
        api_key="k",
        base_url="http://gateway.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with client.responses.stream(model="agent-model", input="x") as events:
        for _ in events:
            pass
        final = events.get_final_response()
    assert final.output_text == "Hello"
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_1", "get_weather", {"city": "Oslo"})
    ]
    assert final.usage.input_tokens == 50


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (400, b'{"error": {"message": "bad model"}}', "invalid_request_error", "bad model"),
        (502, b"gateway down", "server_error", "gateway down"),
    ],
)
def test_an_upstream_error_keeps_its_message_in_the_compatible_shape(status, body, kind, message):
    assert json.loads(translator().error_body(status, body)) == {
        "error": {"message": message, "type": kind, "param": None, "code": None}
    }


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
FIELDS = [
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "text",
    "max_output_tokens",
    "parallel_tool_calls",
    "stream",
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(field=st.sampled_from(FIELDS), value=JSON, base=st.sampled_from([p.values[0] for p in REQUESTS]))
def test_any_json_in_any_request_field_gives_a_body_or_a_refusal(field, value, base):
    step = translator()
    try:
        json.dumps(step.request_body({**base, field: value}))
    except TranslationRefused as refused:
        assert refused.param
    else:
        json.dumps(step.response_body(CHAT_ANSWER))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(value=JSON, at=st.sampled_from(["choices", "usage", "delta", "message", "tool_calls", "error"]))
def test_any_json_from_the_upstream_gives_the_caller_well_formed_events(value, at):
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
    events = events_of(step.stream_event(json.dumps(planted)) + step.stream_end())
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))


CORPUS = Path(__file__).resolve().parents[1] / "clients" / "corpus"
RECORDED = [
    e["file"]
    for e in json.loads((CORPUS / "index.json").read_text())
    if e["file"].endswith("-responses.json")
]


@pytest.mark.parametrize("name", RECORDED)
def test_every_recorded_responses_body_translates_or_names_codexs_server_tool(name):
    body = json.loads((CORPUS / name).read_text())
    if name.startswith("codex"):
        # Codex sends its web search tool, which runs only on OpenAI's Responses API.
        with pytest.raises(TranslationRefused) as refused:
            translator().request_body(body)
        assert body["tools"][int(refused.value.param.split("[")[1].rstrip("]"))]["type"] == "web_search"
        return
    sent = translator().request_body(body)
    assert sent["messages"] and {m["role"] for m in sent["messages"]} <= {
        "system",
        "user",
        "assistant",
        "tool",
    }


@pytest.mark.parametrize(
    ("reasoning_item", "reasoning"),
    [
        (
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Call it."}]},
            "Call it.",
        ),
        (
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Hm."}],
            },
            "Hm.",
        ),
        (
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Call it."}],
                "encrypted_content": "gAAAAB",
            },
            None,
        ),
    ],
    ids=["a summary", "reasoning text", "OpenAI's encrypted reasoning"],
)
def test_a_reasoning_item_goes_back_as_the_next_assistant_messages_reasoning_content(
    reasoning_item, reasoning
):
    """What this translator made of a server's `reasoning_content` comes back as a reasoning item;
    DeepSeek's thinking mode answers 400 to a tool call turn without it."""
    body = {
        "input": [
            {"role": "user", "content": "Weather?"},
            reasoning_item,
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "12C"},
        ]
    }
    assistant = translator().request_body(body)["messages"][1]
    assert assistant.get("reasoning_content") == reasoning
    assert assistant["tool_calls"][0]["id"] == "c1"


@pytest.mark.parametrize("tools", [None, []], ids=["absent", "empty"])
def test_tool_choice_and_parallel_tool_calls_go_only_with_tools(tools):
    """Chat Completions answers 400 "... is only allowed when 'tools' are specified"; the Responses API
    takes both without tools."""
    body: dict[str, Any] = {"input": "hi", "tool_choice": "auto", "parallel_tool_calls": False}
    if tools is not None:
        body["tools"] = tools
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(translator().request_body(body))


def test_a_file_given_by_its_bytes_is_a_chat_file_part():
    part = {"type": "input_file", "filename": "spec.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}
    body = {"input": [{"role": "user", "content": [part, {"type": "input_text", "text": "Sum up"}]}]}
    assert translator().request_body(body)["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "file",
                    "file": {"filename": "spec.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"},
                },
                {"type": "text", "text": "Sum up"},
            ],
        }
    ]
