"""The `openai` kind's text operations over HTTP (mocked with `responses`): where each goes, what it
sends (the endpoint app's body byte for byte, the key as a Bearer token) and how the streams of chat
completions and responses come back."""

from __future__ import annotations

import json

import pytest

from tests.upstreams.conftest import OPENAI_BASE, OPENAI_KEY, sse, text_request, trickled
from upstreams.providers import adapter_for
from upstreams.providers.base import CHAT_COMPLETIONS, RESPONSES, ImageRequest, TextRequest

pytestmark = pytest.mark.django_db

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
RESPONSES_URL = f"{OPENAI_BASE}/responses"
CHAT_BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Bonjour, ça va ?"}]}


@pytest.mark.parametrize("operation, url", [(CHAT_COMPLETIONS, CHAT_URL), (RESPONSES, RESPONSES_URL)])
@pytest.mark.parametrize("stream, accept", [(False, "application/json"), (True, "text/event-stream")])
def test_it_posts_the_body_byte_for_byte_with_the_bearer_key(
    openai_upstream, mocked, operation, url, stream, accept
):
    # Not what json.dumps would make of it: the adapter must not parse and re-encode the body.
    body = b'{ "model":"gpt-4o-mini",  "input":"caf\xc3\xa9", "n":1.0 }'
    mocked.post(
        url,
        body=b"data: [DONE]\n\n" if stream else b"{}",
        content_type="text/event-stream" if stream else "application/json",
    )
    with adapter_for(openai_upstream).call(
        operation, TextRequest(operation=operation, body=body, stream=stream)
    ):
        pass
    sent = mocked.calls[0].request
    assert (sent.method, sent.url, sent.body) == ("POST", url, body)
    assert sent.headers["Authorization"] == f"Bearer {OPENAI_KEY}"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["Accept"] == accept
    assert sent.headers["Content-Length"] == str(len(body))
    assert "x-api-key" not in sent.headers


def test_it_ignores_anthropic_headers_a_caller_gave(openai_upstream, mocked):
    mocked.post(CHAT_URL, json={})
    request = text_request(CHAT_COMPLETIONS, CHAT_BODY, headers={"anthropic-version": "2023-06-01"})
    adapter_for(openai_upstream).call(CHAT_COMPLETIONS, request).close()
    assert "anthropic-version" not in mocked.calls[0].request.headers


@pytest.mark.parametrize("step", [1, 9, 100_000])
def test_a_streamed_chat_completion_yields_each_chunk_then_done(openai_upstream, mocked, step):
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        {
            **chunk,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        },
        {**chunk, "choices": [{"index": 0, "delta": {"content": "Salut 👋"}, "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}},
    ]
    body = sse(*(("", c) for c in chunks), ("", "[DONE]"))
    mocked.post(CHAT_URL, body=trickled(body, step), content_type="text/event-stream; charset=utf-8")
    request = text_request(CHAT_COMPLETIONS, {**CHAT_BODY, "stream": True}, stream=True)
    with adapter_for(openai_upstream).call(CHAT_COMPLETIONS, request) as reply:
        events = list(reply.events)
    assert [e.event for e in events] == [""] * 5
    assert [json.loads(e.data) for e in events[:4]] == chunks
    assert events[-1].data == "[DONE]"


def test_a_streamed_response_yields_its_named_events(openai_upstream, mocked):
    names = [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    body = sse(*((name, {"type": name, "sequence_number": n}) for n, name in enumerate(names)))
    mocked.post(RESPONSES_URL, body=trickled(body, 13), content_type="text/event-stream")
    request = text_request(RESPONSES, {"model": "m", "input": "hi", "stream": True}, stream=True)
    with adapter_for(openai_upstream).call(RESPONSES, request) as reply:
        events = list(reply.events)
    assert [e.event for e in events] == names
    assert [json.loads(e.data)["sequence_number"] for e in events] == list(range(len(names)))


def test_image_operations_still_go_to_the_images_api(openai_upstream, mocked):
    mocked.post(f"{OPENAI_BASE}/images/generations", json={"created": 1, "data": [{"b64_json": "QQ=="}]})
    result = adapter_for(openai_upstream).image_call(
        ImageRequest(operation="generate", upstream_model="m", prompt="p")
    )
    assert result.items[0].b64_json == "QQ=="
