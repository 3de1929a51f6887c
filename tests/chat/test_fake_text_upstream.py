"""The fake upstream's text endpoints (tests/fake_text_upstream.py) answer in shapes the official SDKs
parse: every body and event validates against the SDK's own types, and the SDKs read them. Needs no
database: the fake is a process on 127.0.0.1."""

from __future__ import annotations

import json
import time

import anthropic
import openai
import pytest
import requests
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.fake_text_upstream import CHAT, COUNT_TOKENS, MESSAGES, RESPONSES, input_tokens_for

CHAT_BODY = {"model": "up-chat", "messages": [{"role": "user", "content": "Say hello to the fake world"}]}
RESPONSES_BODY = {"model": "up-resp", "input": "Say hello to the fake world"}
MESSAGES_BODY = {
    "model": "up-claude",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Say hello to the fake world"}],
}
REPLY = "Fake reply to: Say hello to the fake world"
REPLY_TOKENS = len(REPLY.split())


@pytest.fixture
def openai_sdk(fake_upstream):
    return openai.OpenAI(base_url=fake_upstream.base_url, api_key="sk-upstream", max_retries=0)


@pytest.fixture
def anthropic_sdk(fake_upstream):
    root = fake_upstream.base_url.removesuffix("/v1")
    return anthropic.Anthropic(base_url=root, api_key="sk-ant-upstream", max_retries=0)


def post(fake, path, body, **kwargs):
    return requests.post(f"{fake.base_url.removesuffix('/v1')}{path}", json=body, timeout=10, **kwargs)


def sse(raw: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of each event of an event-stream body."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name = data = None
        for line in block.splitlines():
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = value
        events.append((name, data))
    return events


def streamed(fake, path, body, **kwargs):
    response = post(fake, path, {**body, "stream": True}, stream=True, **kwargs)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    return sse(response.content)


def final_message(sdk, body):
    with sdk.messages.stream(**body) as stream:
        return stream.get_final_message()


# OpenAI chat completions


def test_it_answers_a_chat_completion_the_sdk_parses(fake_upstream, openai_sdk):
    raw = post(fake_upstream, CHAT, CHAT_BODY).json()
    ChatCompletion.model_validate(raw)

    completion = openai_sdk.chat.completions.create(**CHAT_BODY)

    assert completion.choices[0].message.content == REPLY
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "up-chat"
    assert completion.usage.prompt_tokens == input_tokens_for(CHAT_BODY)
    assert completion.usage.completion_tokens == REPLY_TOKENS
    assert completion.usage.prompt_tokens_details.cached_tokens == 0


def test_it_streams_chat_chunks_without_usage_unless_asked(fake_upstream, openai_sdk):
    events = streamed(fake_upstream, CHAT, CHAT_BODY)
    assert events[-1] == (None, "[DONE]")
    for _, data in events[:-1]:
        assert ChatCompletionChunk.model_validate_json(data).choices  # no usage-only chunk

    chunks = list(openai_sdk.chat.completions.create(**CHAT_BODY, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == REPLY
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)


def test_it_ends_a_chat_stream_with_a_usage_only_chunk_when_asked(fake_upstream, openai_sdk):
    body = {**CHAT_BODY, "stream_options": {"include_usage": True}}
    events = streamed(fake_upstream, CHAT, body)
    assert events[-1] == (None, "[DONE]")
    for _, data in events[:-1]:
        ChatCompletionChunk.model_validate_json(data)

    chunks = list(openai_sdk.chat.completions.create(**body, stream=True))
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens == input_tokens_for(body)
    assert chunks[-1].usage.completion_tokens == REPLY_TOKENS
    assert all(c.usage is None for c in chunks[:-1])


def test_it_counts_cached_and_reasoning_tokens_from_headers_or_the_script(fake_upstream, openai_sdk):
    completion = openai_sdk.chat.completions.create(
        **CHAT_BODY, extra_headers={"x-fake-cached": "4", "x-fake-reasoning": "7"}
    )
    assert completion.usage.prompt_tokens_details.cached_tokens == 4
    assert completion.usage.completion_tokens_details.reasoning_tokens == 7
    assert completion.usage.completion_tokens == REPLY_TOKENS + 7

    fake_upstream.script(CHAT, {"cached_tokens": 10_000})
    completion = openai_sdk.chat.completions.create(**CHAT_BODY)
    # Cached tokens are part of the prompt: never more than all of it.
    assert completion.usage.prompt_tokens_details.cached_tokens == completion.usage.prompt_tokens


def test_it_counts_tokens_from_the_request_text(fake_upstream, openai_sdk):
    short = openai_sdk.chat.completions.create(**CHAT_BODY)
    longer_body = {**CHAT_BODY, "messages": [{"role": "user", "content": "word " * 100}]}
    longer = openai_sdk.chat.completions.create(**longer_body)
    assert longer.usage.prompt_tokens > short.usage.prompt_tokens
    assert openai_sdk.chat.completions.create(**CHAT_BODY).usage == short.usage


def test_it_stops_at_the_requested_token_limit(fake_upstream, openai_sdk):
    completion = openai_sdk.chat.completions.create(**CHAT_BODY, max_completion_tokens=2)
    assert completion.choices[0].message.content == "Fake reply "
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 2


# OpenAI responses


def test_it_answers_a_response_the_sdk_parses(fake_upstream, openai_sdk):
    Response.model_validate(post(fake_upstream, RESPONSES, RESPONSES_BODY).json())

    response = openai_sdk.responses.create(**RESPONSES_BODY, extra_headers={"x-fake-cached": "2"})

    assert response.output_text == REPLY
    assert response.status == "completed"
    assert response.usage.input_tokens == input_tokens_for(RESPONSES_BODY)
    assert response.usage.input_tokens_details.cached_tokens == 2
    assert response.usage.output_tokens == REPLY_TOKENS


def test_it_streams_response_events_with_the_usage_in_the_completed_one(fake_upstream, openai_sdk):
    events = streamed(fake_upstream, RESPONSES, RESPONSES_BODY)
    adapter = TypeAdapter(ResponseStreamEvent)
    parsed = [adapter.validate_json(data) for _, data in events]
    assert [name for name, _ in events] == [event.type for event in parsed]
    assert [event.sequence_number for event in parsed] == list(range(len(parsed)))
    assert parsed[-1].type == "response.completed"
    assert all(
        getattr(event, "response", None) is None or event.response.usage is None for event in parsed[:-1]
    )

    with openai_sdk.responses.stream(**RESPONSES_BODY) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == REPLY == final.output_text
    assert final.usage.output_tokens == REPLY_TOKENS


# Anthropic messages


def test_it_answers_a_message_the_sdk_parses(fake_upstream, anthropic_sdk):
    Message.model_validate(post(fake_upstream, MESSAGES, MESSAGES_BODY).json())
    fake_upstream.script(MESSAGES, {"cached_tokens": 30, "cache_creation_tokens": 12})

    message = anthropic_sdk.messages.create(**MESSAGES_BODY)

    assert message.content[0].text == REPLY
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == input_tokens_for(MESSAGES_BODY)
    assert message.usage.cache_read_input_tokens == 30
    assert message.usage.cache_creation_input_tokens == 12
    assert message.usage.output_tokens == REPLY_TOKENS


def test_it_streams_message_events_input_usage_first_output_usage_last(fake_upstream, anthropic_sdk):
    events = streamed(fake_upstream, MESSAGES, MESSAGES_BODY)
    adapter = TypeAdapter(RawMessageStreamEvent)
    parsed = [adapter.validate_json(data) for name, data in events if name != "ping"]
    assert [e.type for e in parsed][:2] == ["message_start", "content_block_start"]
    assert [e.type for e in parsed][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert parsed[0].message.usage.input_tokens == input_tokens_for(MESSAGES_BODY)
    assert parsed[-2].usage.output_tokens == REPLY_TOKENS

    fake_upstream.script(MESSAGES, {"cached_tokens": 5})
    with anthropic_sdk.messages.stream(**MESSAGES_BODY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == REPLY == final.content[0].text
    assert final.usage.output_tokens == REPLY_TOKENS
    assert final.usage.cache_read_input_tokens == 5


def test_it_counts_message_tokens(fake_upstream, anthropic_sdk):
    body = {key: MESSAGES_BODY[key] for key in ("model", "messages")}
    MessageTokensCount.model_validate(post(fake_upstream, COUNT_TOKENS, body).json())
    counted = anthropic_sdk.messages.count_tokens(**body)
    assert counted.input_tokens == input_tokens_for(MESSAGES_BODY)


def test_it_records_the_text_requests_with_their_headers_and_body(fake_upstream, anthropic_sdk):
    anthropic_sdk.messages.create(**MESSAGES_BODY)
    (record,) = fake_upstream.requests()
    assert record["path"] == MESSAGES
    assert record["json"] == MESSAGES_BODY
    headers = {name.lower(): value for name, value in record["headers"].items()}
    # SDK releases differ in how they send the key: x-api-key, or a bearer token.
    sent_key = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
    assert sent_key == "sk-ant-upstream"
    assert headers["anthropic-version"]


# Scripted faults


def test_it_answers_scripted_errors_in_each_familys_shape(fake_upstream, openai_sdk, anthropic_sdk):
    fake_upstream.script(MESSAGES, {"status": 400, "error": "max_tokens: field required"})
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: field required") as raised:
        anthropic_sdk.messages.create(**MESSAGES_BODY)
    assert raised.value.body["error"]["type"] == "invalid_request_error"

    fake_upstream.script(MESSAGES, {"status": 529, "error": "Overloaded"})
    with pytest.raises(anthropic.APIStatusError) as raised:
        anthropic_sdk.messages.create(**MESSAGES_BODY)
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["type"] == "overloaded_error"

    fake_upstream.script(CHAT, {"status": 429, "error": "Slow down", "headers": {"Retry-After": "3"}})
    with pytest.raises(openai.RateLimitError, match="Slow down") as raised:
        openai_sdk.chat.completions.create(**CHAT_BODY)
    assert raised.value.response.headers["Retry-After"] == "3"

    fake_upstream.script(RESPONSES, {"status": 500, "error": "boom"})
    with pytest.raises(openai.InternalServerError):
        openai_sdk.responses.create(**RESPONSES_BODY)

    fake_upstream.script(CHAT, {"status": 200, "body": "<html>oops</html>"})
    assert post(fake_upstream, CHAT, CHAT_BODY).text == "<html>oops</html>"


def test_a_cut_stream_ends_before_its_final_event(fake_upstream, anthropic_sdk):
    fake_upstream.script(CHAT, {"action": "cut_stream", "after": 3})
    response = post(fake_upstream, CHAT, {**CHAT_BODY, "stream": True}, stream=True)
    received = b""
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for piece in response.iter_content(chunk_size=None):
            received += piece
    assert len(sse(received)) == 3  # no finish chunk, no [DONE]

    # Not chunked, the cut looks like a clean end: only the missing final event tells.
    fake_upstream.script(MESSAGES, {"action": "cut_stream", "after": 99, "framing": "close"})
    events = streamed(fake_upstream, MESSAGES, MESSAGES_BODY)
    assert events[-1][0] == "message_delta"  # everything but message_stop

    fake_upstream.script(MESSAGES, {"action": "cut_stream"})
    with pytest.raises(Exception, match="incomplete chunked read"):  # the SDK's HTTP client's error
        final_message(anthropic_sdk, MESSAGES_BODY)


def test_a_stream_error_event_raises_in_the_sdk(fake_upstream, openai_sdk, anthropic_sdk):
    fake_upstream.script(MESSAGES, {"action": "stream_error", "after": 3})
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
        final_message(anthropic_sdk, MESSAGES_BODY)

    fake_upstream.script(CHAT, {"action": "stream_error", "after": 2})
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        list(openai_sdk.chat.completions.create(**CHAT_BODY, stream=True))


def test_it_waits_between_events_when_scripted(fake_upstream):
    fake_upstream.script(RESPONSES, {"event_delay": 0.05})
    started = time.monotonic()
    events = streamed(fake_upstream, RESPONSES, RESPONSES_BODY)
    assert time.monotonic() - started >= 0.05 * (len(events) - 1)
    assert json.loads(events[-1][1])["type"] == "response.completed"
