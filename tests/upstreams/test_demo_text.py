"""The `demo` kind's text answers, offline: each family's answer, streamed or not, is what the official
SDK's types accept; usage is counted from the request and the text produced; the output limit cuts
the text and ends the answer as the family ends a truncated one."""

from __future__ import annotations

import json
import re

import anthropic.types
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
