"""translators.chat_via_gemini: an OpenAI Chat Completions caller on Google's generateContent API.

Tables after Google's documented examples, whole and streamed; the translated stream read back by the
official `openai` SDK (its HTTP transport replaced by httpx's MockTransport); any JSON anywhere gives
a body or a TranslationRefused; the recorded chat bodies of real clients translate."""

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
from translators.chat_via_gemini import ChatViaGemini

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def translator(upstream_model: str = "gemini-2.5-flash") -> ChatViaGemini:
    return ChatViaGemini(
        TranslatedCall("gpt-via-gemini", upstream_model, "gemini", max_tokens=4096, created=1700000000)
    )


def test_it_translates_a_chat_request_into_generate_content():
    body = {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_completion_tokens": 200,
        "temperature": 0.3,
        "top_p": 0.9,
        "stop": ["END"],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": {"type": "object"}},
        },
        "reasoning_effort": "low",
        "user": "u-1",
        "parallel_tool_calls": True,
    }
    assert translator().request_body(body) == {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "What is this?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBOR"}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"id": "call_1", "name": "get_weather", "args": {"city": "Oslo"}}}
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "call_1",
                            "name": "get_weather",
                            "response": {"content": "12C"},
                        }
                    },
                    {"text": "Thanks"},
                ],
            },
        ],
        "systemInstruction": {"parts": [{"text": "Be terse."}]},
        "generationConfig": {
            "maxOutputTokens": 200,
            "temperature": 0.3,
            "topP": 0.9,
            "stopSequences": ["END"],
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object"},
            "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
        },
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Weather",
                        "parametersJsonSchema": WEATHER["function"]["parameters"],
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
    }


def call(call_id: str, city: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": f'{{"city":"{city}"}}'},
    }


TOOL_LOOP = [
    {"role": "user", "content": "Weather in Oslo and Bergen, then Rome?"},
    {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [call("call_1", "Oslo"), call("call_2", "Bergen")],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "10C"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_3", "Rome")]},
    {"role": "tool", "tool_call_id": "call_3", "content": "20C"},
]
SIGNATURE = "c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I="  # base64 of skip_thought_signature_validator


@pytest.mark.parametrize(
    "upstream_model",
    ["gemini-3-pro-preview", "gemini-3.5-flash", "models/gemini-4-flash", "gemini-flash-latest"],
)
def test_a_model_that_checks_thought_signatures_gets_googles_placeholder_on_each_steps_first_call(
    upstream_model,
):
    """Gemini 3 answers 400 to a history whose function calls lack the thought signature it gave them
    ("Function call is missing a thought_signature"); as Gemini signs them, the first call of each
    step carries one, here Google's documented placeholder."""
    sent = translator(upstream_model).request_body({"messages": TOOL_LOOP, "tools": [WEATHER]})
    model_turns = [content["parts"] for content in sent["contents"] if content["role"] == "model"]
    assert [[part.get("thoughtSignature") for part in parts] for parts in model_turns] == [
        [None, SIGNATURE, None],  # the text, then the two parallel calls: the first signed
        [SIGNATURE],
    ]


@pytest.mark.parametrize("upstream_model", ["gemini-2.5-flash", "gemini-2.0-flash", "gemini-1.5-pro"])
def test_a_model_before_gemini_3_gets_no_thought_signature(upstream_model):
    sent = translator(upstream_model).request_body({"messages": TOOL_LOOP, "tools": [WEATHER]})
    assert "thoughtSignature" not in json.dumps(sent)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [], "n": 3}, "n"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url",
        ),
        (
            {"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
            "messages[0].tool_call_id",
        ),
        ({"messages": [], "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "messages[0].content[0]"),
    ],
)
def test_what_gemini_cannot_be_sent_is_refused_naming_the_field(body, param):
    with pytest.raises(TranslationRefused) as refused:
        translator().request_body(body)
    assert refused.value.param == param


def test_it_translates_a_generate_content_answer_into_a_chat_completion():
    step = translator()
    answer = step.response_body(
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {"text": "Thinking...", "thought": True},
                            {"text": "Let me check."},
                            {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
                        ],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 120,
                "cachedContentTokenCount": 20,
                "candidatesTokenCount": 30,
                "thoughtsTokenCount": 5,
                "totalTokenCount": 155,
            },
            "responseId": "abc",
        }
    )
    message = answer["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("Let me check.", "Thinking...")
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Oslo"}'}
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    assert answer["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 35,
        "total_tokens": 155,
        "prompt_tokens_details": {"cached_tokens": 20},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    assert step.tokens == TranslatedTokens(input=100, cached=20, output=35, reasoning=5)


@pytest.mark.parametrize(
    ("reason", "finish"), [("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("STOP", "stop")]
)
def test_finish_reasons_map_to_chats(reason, finish):
    answer = translator().response_body(
        {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]}
    )
    assert answer["choices"][0]["finish_reason"] == finish


STREAM = [
    json.dumps(
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}],
            "usageMetadata": {"promptTokenCount": 50},
        }
    ),
    json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}}]}),
    json.dumps(
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}],
                    },
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 12, "totalTokenCount": 62},
        }
    ),
]


def test_the_official_openai_sdk_assembles_the_translated_stream():
    step = translator()
    step.request_body(
        {
            "messages": [{"role": "user", "content": "x"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    raw = b"".join(step.stream_event(piece) for piece in STREAM) + step.stream_end()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = openai.OpenAI(
        api_key="k",
        base_url="http://gateway.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with client.chat.completions.stream(
        model="gpt-via-gemini", messages=[{"role": "user", "content": "x"}]
    ) as events:
        for _ in events:
            pass
        final = events.get_final_completion()
    assert final.choices[0].message.content == "Hello"
    assert json.loads(final.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert final.choices[0].finish_reason == "tool_calls"
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (50, 12)


def test_an_error_reaches_the_caller_in_the_compatible_shape():
    body = b'{"error": {"code": 400, "message": "API key not valid", "status": "INVALID_ARGUMENT"}}'
    assert json.loads(translator().error_body(400, body))["error"]["message"] == "API key not valid"


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
    "temperature",
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(field=st.sampled_from(FIELDS), value=JSON)
def test_any_json_in_any_request_field_gives_a_body_or_a_refusal(field, value):
    base: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER]}
    try:
        json.dumps(translator().request_body({**base, field: value}))
    except TranslationRefused as refused:
        assert refused.param


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(value=JSON, at=st.sampled_from(["candidates", "content", "parts", "usage", "error"]))
def test_any_json_from_gemini_gives_the_caller_well_formed_chunks(value, at):
    planted = {
        "candidates": {"candidates": value},
        "content": {"candidates": [{"content": value}]},
        "parts": {"candidates": [{"content": {"parts": value}, "finishReason": "STOP"}]},
        "usage": {"usageMetadata": value},
        "error": {"error": value},
    }[at]
    json.dumps(translator().response_body(planted))
    step = translator()
    raw = step.stream_event(json.dumps(planted)) + step.stream_end()
    for block in raw.decode().split("\n\n"):
        if block and block != "data: [DONE]":
            json.loads(block.removeprefix("data: "))


CORPUS = Path(__file__).resolve().parents[1] / "clients" / "corpus"
RECORDED = [
    e["file"] for e in json.loads((CORPUS / "index.json").read_text()) if e["file"].endswith("-chat.json")
]


@pytest.mark.parametrize("name", RECORDED)
def test_every_recorded_chat_body_translates(name):
    sent = translator().request_body(json.loads((CORPUS / name).read_text()))
    assert sent["contents"]


def test_a_file_given_by_its_bytes_is_an_inline_part_and_one_given_by_id_is_refused():
    pdf = {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}}
    body = {"messages": [{"role": "user", "content": [pdf, {"type": "text", "text": "Sum up"}]}]}
    assert translator().request_body(body)["contents"] == [
        {
            "role": "user",
            "parts": [
                {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0x"}},
                {"text": "Sum up"},
            ],
        }
    ]
    by_id = {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]}
    with pytest.raises(TranslationRefused) as refused:
        translator().request_body(by_id)
    assert refused.value.param == "messages[0].content[0].file"
