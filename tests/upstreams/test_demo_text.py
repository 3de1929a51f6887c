"""The `demo` kind's text answers, offline: each family's answer, streamed or not, is what the official
SDK's types accept; usage is counted from the request and the text produced; the output limit cuts
the text and ends the answer as the family ends a truncated one."""

from __future__ import annotations

import json
import re

import anthropic.types
import jsonschema
import openai.types.chat
import openai.types.responses
import pytest
from pydantic import TypeAdapter

from tests.upstreams.conftest import text_request
from upstreams.providers import adapter_for
from upstreams.providers.base import (
    CHAT_COMPLETIONS,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    RESPONSES,
    SSEEvent,
    TextReply,
)

pytestmark = pytest.mark.django_db

PROMPT = "Write a short poem about a fox who learns to read, in the style of a nursery rhyme."
CHAT = {
    "model": "demo-chat",
    "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": PROMPT}],
}
RESPONSE = {"model": "demo-chat", "instructions": "Be kind.", "input": PROMPT}
MESSAGE = {
    "model": "demo-claude",
    "max_tokens": 1024,
    "system": [{"type": "text", "text": "Be kind."}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}],
}
RESPONSE_EVENT = TypeAdapter(openai.types.responses.ResponseStreamEvent)
MESSAGE_EVENT = TypeAdapter(anthropic.types.RawMessageStreamEvent)


def tokens(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


def ask(upstream, operation: str, body: dict, *, stream: bool = False) -> TextReply:
    return adapter_for(upstream).call(operation, text_request(operation, body, stream=stream))


def answer(upstream, operation: str, body: dict) -> dict:
    with ask(upstream, operation, body) as reply:
        assert (reply.status, reply.content_type, reply.events) == (200, "application/json", None)
        return json.loads(reply.body)


def streamed(upstream, operation: str, body: dict) -> list[SSEEvent]:
    with ask(upstream, operation, body, stream=True) as reply:
        assert (reply.status, reply.content_type, reply.body) == (200, "text/event-stream", b"")
        return list(reply.events)


def chat_chunks(events: list[SSEEvent]) -> list[openai.types.chat.ChatCompletionChunk]:
    assert events[-1] == SSEEvent(event="", data="[DONE]")
    assert all(event.event == "" for event in events)
    return [openai.types.chat.ChatCompletionChunk.model_validate_json(e.data) for e in events[:-1]]


def named(events: list[SSEEvent], adapter: TypeAdapter) -> list:
    parsed = [adapter.validate_json(event.data) for event in events]
    assert [event.event for event in events] == [item.type for item in parsed]
    return parsed


# --- each family's shape ---------------------------------------------------------------------------


def test_the_answer_speaks_to_the_last_text_of_the_callers_message_not_its_reminders(demo_upstream):
    """Agent CLIs (Claude Code, Qwen Code) send their reminders as earlier text parts of the prompt's
    message; the demo echoes the prompt, as `make run` users of those CLIs see it."""
    reminder = {"type": "text", "text": "<system-reminder>Skills: batch, review.</system-reminder>"}
    body = {**CHAT, "messages": [{"role": "user", "content": [reminder, {"type": "text", "text": "Say hi"}]}]}

    completion = openai.types.chat.ChatCompletion.model_validate(
        answer(demo_upstream, CHAT_COMPLETIONS, body)
    )

    assert completion.choices[0].message.content.startswith('Demo reply to: "Say hi". ')


def test_a_chat_completion_is_what_the_openai_sdk_parses(demo_upstream, mocked):
    completion = openai.types.chat.ChatCompletion.model_validate(
        answer(demo_upstream, CHAT_COMPLETIONS, CHAT)
    )
    assert completion.object == "chat.completion" and completion.model == "demo-chat"
    choice = completion.choices[0]
    assert (choice.finish_reason, choice.message.role) == ("stop", "assistant")
    assert choice.message.content.startswith('Demo reply to: "Write a short poem about a fox who ...". ')
    assert completion.usage.completion_tokens == tokens(choice.message.content)
    # 3 per message, "Be kind." (3 pieces) and the prompt (20)
    assert completion.usage.prompt_tokens == 3 + 3 + 3 + tokens(PROMPT) == 29
    assert (
        completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    assert len(mocked.calls) == 0  # offline


def test_a_streamed_chat_completion_is_chunks_then_done(demo_upstream):
    whole = answer(demo_upstream, CHAT_COMPLETIONS, CHAT)["choices"][0]["message"]["content"]
    chunks = chat_chunks(streamed(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "stream": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(chunks) > 5
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole
    assert [c.choices[0].finish_reason for c in chunks][-2:] == [None, "stop"]
    assert all(c.usage is None for c in chunks)
    assert all(c.object == "chat.completion.chunk" and len(c.choices) == 1 for c in chunks)


def test_a_streamed_chat_completion_ends_with_usage_only_when_asked(demo_upstream):
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    chunks = chat_chunks(streamed(demo_upstream, CHAT_COMPLETIONS, body))
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert (
        usage_chunk.usage
        == openai.types.chat.ChatCompletion.model_validate(
            answer(demo_upstream, CHAT_COMPLETIONS, CHAT)
        ).usage
    )
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks[:-1])
    no_usage = {**CHAT, "stream": True, "stream_options": {"include_usage": False}}
    assert all(c.choices for c in chat_chunks(streamed(demo_upstream, CHAT_COMPLETIONS, no_usage)))


def test_a_response_is_what_the_openai_sdk_parses(demo_upstream):
    response = openai.types.responses.Response.model_validate(answer(demo_upstream, RESPONSES, RESPONSE))
    assert (response.object, response.status, response.model) == ("response", "completed", "demo-chat")
    assert response.store is False  # nothing is kept to be retrieved later
    assert response.output_text.startswith('Demo reply to: "Write a short poem')
    usage = response.usage
    assert usage.input_tokens == 3 + 3 + 3 + tokens(PROMPT)  # the input message and the instructions
    assert usage.output_tokens == tokens(response.output_text)
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert (usage.input_tokens_details.cached_tokens, usage.output_tokens_details.reasoning_tokens) == (0, 0)


def test_a_streamed_response_is_the_responses_api_event_sequence(demo_upstream):
    whole = openai.types.responses.Response.model_validate(answer(demo_upstream, RESPONSES, RESPONSE))
    events = named(streamed(demo_upstream, RESPONSES, {**RESPONSE, "stream": True}), RESPONSE_EVENT)
    types = [event.type for event in events]
    deltas = types.count("response.output_text.delta")
    assert deltas > 5
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-4].text
    final = events[-1].response
    assert (final.status, final.output_text, final.usage) == ("completed", whole.output_text, whole.usage)
    assert final.store is False and events[0].response.store is False
    assert events[0].response.status == "in_progress" and events[0].response.usage is None


def test_a_message_is_what_the_anthropic_sdk_parses(demo_upstream):
    message = anthropic.types.Message.model_validate(answer(demo_upstream, MESSAGES, MESSAGE))
    assert (message.type, message.role, message.model, message.stop_reason) == (
        "message",
        "assistant",
        "demo-claude",
        "end_turn",
    )
    text = message.content[0].text
    assert text.startswith('Demo reply to: "Write a short poem')
    assert message.usage.output_tokens == tokens(text)
    assert message.usage.input_tokens == 3 + 3 + 3 + tokens(PROMPT)  # the message and the system prompt


def test_a_streamed_message_is_anthropics_event_sequence(demo_upstream):
    whole = anthropic.types.Message.model_validate(answer(demo_upstream, MESSAGES, MESSAGE))
    events = named(streamed(demo_upstream, MESSAGES, {**MESSAGE, "stream": True}), MESSAGE_EVENT)
    types = [event.type for event in events]
    deltas = types.count("content_block_delta")
    assert deltas > 5
    assert types == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start, delta = events[0].message, events[-2]
    assert (start.usage.input_tokens, start.usage.output_tokens) == (whole.usage.input_tokens, 1)
    assert start.content == [] and start.stop_reason is None
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == whole.content[0].text
    assert (delta.delta.stop_reason, delta.usage.output_tokens) == ("end_turn", whole.usage.output_tokens)


def test_a_token_count_is_the_input_a_message_call_reports(demo_upstream):
    count = anthropic.types.MessageTokensCount.model_validate(
        answer(demo_upstream, MESSAGES_COUNT_TOKENS, {k: v for k, v in MESSAGE.items() if k != "max_tokens"})
    )
    message = anthropic.types.Message.model_validate(answer(demo_upstream, MESSAGES, MESSAGE))
    start = MESSAGE_EVENT.validate_json(streamed(demo_upstream, MESSAGES, MESSAGE)[0].data)
    assert count.input_tokens == message.usage.input_tokens == start.message.usage.input_tokens > 0
    with ask(demo_upstream, MESSAGES_COUNT_TOKENS, MESSAGE, stream=True) as reply:
        assert reply.events is None  # never streamed
        assert json.loads(reply.body) == {"input_tokens": count.input_tokens}


def test_every_text_in_the_request_counts_and_the_same_text_counts_the_same(demo_upstream):
    def input_tokens(body):
        return answer(demo_upstream, MESSAGES_COUNT_TOKENS, body)["input_tokens"]

    one = {"messages": [{"role": "user", "content": "Hello, world!"}]}
    assert input_tokens(one) == 3 + 4
    as_blocks = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello, world!"}]}]}
    assert input_tokens(as_blocks) == input_tokens(one)
    longer = {"messages": [*one["messages"], {"role": "assistant", "content": "Hi."}, *one["messages"]]}
    assert input_tokens(longer) == 7 + (3 + 2) + 7


# --- the output limit ------------------------------------------------------------------------------


def test_max_completion_tokens_cuts_a_chat_completion_with_finish_reason_length(demo_upstream):
    full = answer(demo_upstream, CHAT_COMPLETIONS, CHAT)["choices"][0]["message"]["content"]
    completion = openai.types.chat.ChatCompletion.model_validate(
        answer(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "max_completion_tokens": 6})
    )
    text = completion.choices[0].message.content
    assert (completion.choices[0].finish_reason, completion.usage.completion_tokens, tokens(text)) == (
        "length",
        6,
        6,
    )
    assert full.startswith(text)
    legacy = answer(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "max_tokens": 6})
    assert legacy["choices"][0]["message"]["content"] == text
    chunks = chat_chunks(streamed(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "max_completion_tokens": 6}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_a_limit_the_text_fits_in_changes_nothing(demo_upstream):
    full = answer(demo_upstream, CHAT_COMPLETIONS, CHAT)
    limited = answer(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "max_completion_tokens": 10_000})
    assert limited["choices"] == full["choices"]


def test_max_output_tokens_leaves_a_response_incomplete(demo_upstream):
    body = {**RESPONSE, "max_output_tokens": 4}
    response = openai.types.responses.Response.model_validate(answer(demo_upstream, RESPONSES, body))
    assert (response.status, response.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert (response.usage.output_tokens, tokens(response.output_text)) == (4, 4)
    assert response.max_output_tokens == 4
    events = named(streamed(demo_upstream, RESPONSES, body), RESPONSE_EVENT)
    assert events[-1].type == "response.incomplete"  # as OpenAI ends a stream the limit cut
    assert (events[-1].response.status, events[-1].response.output_text) == (
        "incomplete",
        response.output_text,
    )


def test_max_tokens_stops_a_message_with_stop_reason_max_tokens(demo_upstream):
    body = {**MESSAGE, "max_tokens": 3}
    message = anthropic.types.Message.model_validate(answer(demo_upstream, MESSAGES, body))
    assert (message.stop_reason, message.usage.output_tokens, tokens(message.content[0].text)) == (
        "max_tokens",
        3,
        3,
    )
    events = named(streamed(demo_upstream, MESSAGES, body), MESSAGE_EVENT)
    assert (events[-2].delta.stop_reason, events[-2].usage.output_tokens) == ("max_tokens", 3)


# --- what a provider would refuse ------------------------------------------------------------------


@pytest.mark.parametrize("operation", [CHAT_COMPLETIONS, RESPONSES])
def test_a_body_that_is_not_a_json_object_is_openais_400(demo_upstream, operation):
    with adapter_for(demo_upstream).call(operation, text_request(operation, [1])) as reply:
        assert reply.status == 400
        assert json.loads(reply.body)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("operation", [MESSAGES, MESSAGES_COUNT_TOKENS])
def test_a_body_that_is_not_a_json_object_is_anthropics_400(demo_upstream, operation):
    with adapter_for(demo_upstream).call(operation, text_request(operation, "text", stream=True)) as reply:
        assert (reply.status, reply.events) == (400, None)
        body = json.loads(reply.body)
        assert (body["type"], body["error"]["type"]) == ("error", "invalid_request_error")


# --- as a model for agent clients ------------------------------------------------------------------

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "type": {"type": "string"},  # a parameter named `type`, as Codex CLI's tools have
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "type", "days"],
    "additionalProperties": False,
}
NOTE = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "note", "parameters": NOTE}},
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
]
RESPONSE_TOOLS = [
    {"type": "function", "name": "note", "parameters": NOTE},
    {"type": "function", "name": "get_weather", "parameters": WEATHER},
]
MESSAGE_TOOLS = [{"name": "note", "input_schema": NOTE}, {"name": "get_weather", "input_schema": WEATHER}]
ASKED = "What is the weather in Paris? Use get_weather."


def valid(arguments: dict, schema: dict) -> dict:
    jsonschema.validate(arguments, schema)
    return arguments


def chat_call(**extra) -> dict:
    return {**CHAT, "messages": [{"role": "user", "content": ASKED}], "tools": CHAT_TOOLS, **extra}


def response_call(**extra) -> dict:
    return {**RESPONSE, "input": ASKED, "tools": RESPONSE_TOOLS, **extra}


def message_call(**extra) -> dict:
    return {**MESSAGE, "messages": [{"role": "user", "content": ASKED}], "tools": MESSAGE_TOOLS, **extra}


def test_a_chat_tool_call_for_a_named_tool_has_arguments_valid_against_its_schema(demo_upstream):
    completion = openai.types.chat.ChatCompletion.model_validate(
        answer(demo_upstream, CHAT_COMPLETIONS, chat_call())
    )

    (choice,) = completion.choices
    (call,) = choice.message.tool_calls
    assert (choice.finish_reason, call.function.name, choice.message.content) == (
        "tool_calls",
        "get_weather",
        None,
    )
    valid(json.loads(call.function.arguments), WEATHER)
    assert completion.usage.completion_tokens == tokens("get_weather" + call.function.arguments)


def test_a_streamed_chat_tool_call_sends_its_arguments_in_pieces(demo_upstream):
    chunks = chat_chunks(streamed(demo_upstream, CHAT_COMPLETIONS, chat_call(tool_choice="required")))

    deltas = [chunk.choices[0].delta for chunk in chunks]
    opened = deltas[1].tool_calls[0]
    arguments = "".join(d.tool_calls[0].function.arguments for d in deltas[1:] if d.tool_calls)
    assert (opened.id.startswith("call_"), opened.function.name) == (True, "note")  # required: the first
    pieces = [d.tool_calls[0].function.arguments for d in deltas[2:] if d.tool_calls]
    assert pieces == [arguments[at : at + 16] for at in range(0, len(arguments), 16)]  # 16 characters each
    valid(json.loads(arguments), NOTE)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_response_calls_the_named_function_streamed_and_not(demo_upstream):
    forced = response_call(input="Hello", tool_choice={"type": "function", "name": "get_weather"})
    response = openai.types.responses.Response.model_validate(answer(demo_upstream, RESPONSES, forced))
    events = named(streamed(demo_upstream, RESPONSES, forced), RESPONSE_EVENT)

    (call,) = response.output
    assert (call.type, call.name, call.call_id.startswith("call_")) == ("function_call", "get_weather", True)
    valid(json.loads(call.arguments), WEATHER)
    pieces = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert pieces == done.arguments
    valid(json.loads(pieces), WEATHER)
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_message_uses_the_forced_tool_streamed_and_not(demo_upstream):
    forced = message_call(tool_choice={"type": "tool", "name": "note"})
    message = anthropic.types.Message.model_validate(answer(demo_upstream, MESSAGES, forced))
    events = named(streamed(demo_upstream, MESSAGES, forced), MESSAGE_EVENT)

    (block,) = message.content
    assert (message.stop_reason, block.type, block.name) == ("tool_use", "tool_use", "note")
    valid(block.input, NOTE)
    partial = "".join(e.delta.partial_json for e in events if e.type == "content_block_delta")
    valid(json.loads(partial), NOTE)
    assert events[0].message.usage.input_tokens == message.usage.input_tokens > 0  # known at the start
    assert next(e for e in events if e.type == "message_delta").delta.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("operation", "body"),
    [
        (CHAT_COMPLETIONS, chat_call(messages=[{"role": "user", "content": "Hello"}])),
        (RESPONSES, response_call(input="Hello")),
        (MESSAGES, message_call(messages=[{"role": "user", "content": "Hello"}])),
        (CHAT_COMPLETIONS, chat_call(tool_choice="none")),
        (MESSAGES, message_call(tool_choice={"type": "none"})),
    ],
    ids=["chat", "responses", "messages", "chat-none", "messages-none"],
)
def test_without_a_forced_or_named_tool_the_answer_is_text(demo_upstream, operation, body):
    payload = json.dumps(answer(demo_upstream, operation, body))

    assert "Demo reply to" in payload
    for call in ('"tool_calls": [', '"type": "tool_use"', '"type": "function_call"'):
        assert call not in payload


@pytest.mark.parametrize(
    "chat_result",
    ["Sunny, 21 degrees", [{"type": "text", "text": "Sunny,"}, {"type": "text", "text": "21 degrees"}]],
    ids=["string", "text-parts"],  # Chat Completions takes either; Qwen Code sends parts
)
def test_after_a_tool_result_each_family_answers_in_text(demo_upstream, chat_result):
    chat = chat_call(
        messages=[
            {"role": "user", "content": ASKED},
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
            {"role": "tool", "tool_call_id": "call_1", "content": chat_result},
        ]
    )
    responses = response_call(
        input=[
            {"role": "user", "content": ASKED},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 degrees"},
        ]
    )
    messages = message_call(
        messages=[
            {"role": "user", "content": ASKED},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 degrees"}
                ],
            },
        ]
    )

    completion = openai.types.chat.ChatCompletion.model_validate(
        answer(demo_upstream, CHAT_COMPLETIONS, chat)
    )
    response = openai.types.responses.Response.model_validate(answer(demo_upstream, RESPONSES, responses))
    message = anthropic.types.Message.model_validate(answer(demo_upstream, MESSAGES, messages))

    expected = 'Demo reply after the tool result: "Sunny, 21 degrees".'
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.content.startswith(expected)
    assert response.output_text.startswith(expected)
    assert message.stop_reason == "end_turn"
    assert message.content[0].text.startswith(expected)


SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "score": {"type": "integer", "minimum": 0, "maximum": 10}},
    "required": ["title", "score"],
    "additionalProperties": False,
}


def chat_text(payload: dict) -> str:
    return payload["choices"][0]["message"]["content"]


def chat_streamed_text(events: list[SSEEvent]) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in chat_chunks(events) if chunk.choices)


def response_text(payload: dict) -> str:
    return openai.types.responses.Response.model_validate(payload).output_text


def response_streamed_text(events: list[SSEEvent]) -> str:
    return "".join(e.delta for e in named(events, RESPONSE_EVENT) if e.type == "response.output_text.delta")


def message_text(payload: dict) -> str:
    return payload["content"][0]["text"]


def message_streamed_text(events: list[SSEEvent]) -> str:
    return "".join(e.delta.text for e in named(events, MESSAGE_EVENT) if e.type == "content_block_delta")


JSON_FORMATS = [
    (
        CHAT_COMPLETIONS,
        {**CHAT, "response_format": {"type": "json_object"}},
        None,
        chat_text,
        chat_streamed_text,
    ),
    (
        CHAT_COMPLETIONS,
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}},
        SCHEMA,
        chat_text,
        chat_streamed_text,
    ),
    (
        RESPONSES,
        {**RESPONSE, "text": {"format": {"type": "json_object"}}},
        None,
        response_text,
        response_streamed_text,
    ),
    (
        RESPONSES,
        {**RESPONSE, "text": {"format": {"type": "json_schema", "name": "r", "schema": SCHEMA}}},
        SCHEMA,
        response_text,
        response_streamed_text,
    ),
    (
        MESSAGES,
        {**MESSAGE, "output_format": {"type": "json_schema", "schema": SCHEMA}},
        SCHEMA,
        message_text,
        message_streamed_text,
    ),
    (
        MESSAGES,
        {**MESSAGE, "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
        SCHEMA,
        message_text,
        message_streamed_text,
    ),
]


@pytest.mark.parametrize(
    ("operation", "body", "schema", "text_of", "streamed_text_of"),
    JSON_FORMATS,
    ids=[
        "chat-json",
        "chat-schema",
        "responses-json",
        "responses-schema",
        "messages-format",
        "messages-config",
    ],
)
def test_json_formats_answer_json_valid_against_the_schema_streamed_and_not(
    demo_upstream, operation, body, schema, text_of, streamed_text_of
):
    whole = json.loads(text_of(answer(demo_upstream, operation, body)))
    pieces = json.loads(streamed_text_of(streamed(demo_upstream, operation, body)))

    for value in (whole, pieces):
        assert isinstance(value, dict)
        if schema is not None:
            valid(value, schema)


def test_n_gives_that_many_choices_and_counts_the_output_of_each(demo_upstream):
    one = openai.types.chat.ChatCompletion.model_validate(answer(demo_upstream, CHAT_COMPLETIONS, CHAT))
    three = openai.types.chat.ChatCompletion.model_validate(
        answer(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "n": 3})
    )
    chunks = chat_chunks(streamed(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "n": 3}))

    assert [choice.index for choice in three.choices] == [0, 1, 2]
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    for index in range(3):
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices[0].index == index)
        assert text == three.choices[index].message.content
    assert [c.choices[0].index for c in chunks if c.choices[0].finish_reason] == [0, 1, 2]


def test_stop_sequences_end_the_text_before_them(demo_upstream):
    chat = openai.types.chat.ChatCompletion.model_validate(
        answer(demo_upstream, CHAT_COMPLETIONS, {**CHAT, "stop": ["offline"]})
    )
    message = anthropic.types.Message.model_validate(
        answer(demo_upstream, MESSAGES, {**MESSAGE, "stop_sequences": ["nope", "offline"]})
    )
    events = named(
        streamed(demo_upstream, MESSAGES, {**MESSAGE, "stop_sequences": ["offline"]}), MESSAGE_EVENT
    )

    text = chat.choices[0].message.content
    assert text.endswith("written ") and "offline" not in text
    assert (chat.choices[0].finish_reason, chat.usage.completion_tokens) == ("stop", tokens(text))
    assert (message.stop_reason, message.stop_sequence, message.content[0].text) == (
        "stop_sequence",
        "offline",
        text,
    )
    assert (events[-2].delta.stop_reason, events[-2].delta.stop_sequence) == ("stop_sequence", "offline")


def test_every_answer_has_ids_of_its_own(demo_upstream):
    first, second = (answer(demo_upstream, CHAT_COMPLETIONS, chat_call(tool_choice="required")) for _ in "ab")

    assert first["id"] != second["id"]
    ids = [c["choices"][0]["message"]["tool_calls"][0]["id"] for c in (first, second)]
    assert ids[0] != ids[1]
    assert answer(demo_upstream, MESSAGES, MESSAGE)["id"] != answer(demo_upstream, MESSAGES, MESSAGE)["id"]


NO_MAX_TOKENS = {key: value for key, value in MESSAGE.items() if key != "max_tokens"}
UNKNOWN_TOOL = {"type": "function", "function": {"name": "x"}}
NOT_A_SCHEMA = {"type": "function", "function": {"name": "f", "parameters": 3}}


@pytest.mark.parametrize(
    ("operation", "body", "param", "message"),
    [
        (CHAT_COMPLETIONS, {"model": "demo-chat"}, "messages", "Missing required parameter: 'messages'."),
        (RESPONSES, {"model": "demo-chat"}, "input", "Missing required parameter: 'input'."),
        (MESSAGES, NO_MAX_TOKENS, None, "max_tokens: Field required"),
        (MESSAGES_COUNT_TOKENS, {"model": "demo-claude"}, None, "messages: Field required"),
        (CHAT_COMPLETIONS, {**CHAT, "messages": []}, "messages", None),
        (CHAT_COMPLETIONS, chat_call(tool_choice=UNKNOWN_TOOL), "tool_choice", None),
        (CHAT_COMPLETIONS, {**CHAT, "tools": [NOT_A_SCHEMA]}, "tools[0]", None),
        (CHAT_COMPLETIONS, {**CHAT, "n": 0}, "n", None),
        (MESSAGES, message_call(tool_choice={"type": "any"}, tools=[]), None, None),
        (MESSAGES, {**MESSAGE, "messages": [{"role": "tool", "content": "x"}]}, None, None),
    ],
    ids=[
        "chat-no-messages", "responses-no-input", "messages-no-max-tokens", "count-no-messages",
        "chat-empty-messages", "chat-unknown-forced-tool", "chat-schema-not-object", "chat-n-zero",
        "messages-any-without-tools", "messages-tool-role",
    ],
)  # fmt: skip
def test_it_refuses_what_the_real_apis_refuse_in_their_shape(demo_upstream, operation, body, param, message):
    with ask(demo_upstream, operation, body) as reply:
        assert (reply.status, reply.events) == (400, None)
        payload = json.loads(reply.body)
    if operation in (MESSAGES, MESSAGES_COUNT_TOKENS):
        assert (payload["type"], payload["error"]["type"]) == ("error", "invalid_request_error")
    else:
        assert (payload["error"]["type"], payload["error"]["param"]) == ("invalid_request_error", param)
    if message is not None:
        assert payload["error"]["message"] == message


def test_a_system_message_among_anthropic_messages_is_answered(demo_upstream):
    body = {
        **MESSAGE,
        "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}],
    }

    message = anthropic.types.Message.model_validate(answer(demo_upstream, MESSAGES, body))

    assert message.content[0].text.startswith('Demo reply to: "Hi"')


def test_only_the_last_text_of_the_callers_message_can_name_a_tool(demo_upstream):
    """Agent clients put reminders that list their tools before the prompt in the same message."""
    reminder = {"type": "text", "text": "<reminder>Tools: note, get_weather</reminder>"}
    listed = message_call(
        messages=[{"role": "user", "content": [reminder, {"type": "text", "text": "Hello"}]}]
    )
    asked = message_call(messages=[{"role": "user", "content": [reminder, {"type": "text", "text": ASKED}]}])

    assert answer(demo_upstream, MESSAGES, listed)["stop_reason"] == "end_turn"
    assert answer(demo_upstream, MESSAGES, asked)["content"][0]["name"] == "get_weather"
