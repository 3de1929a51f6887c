"""The `anthropic` kind over HTTP (mocked with `responses`): messages and token counts go to the
versioned base URL with the key in x-api-key, Anthropic's version and beta headers, the endpoint app's
body byte for byte, and a message stream's named events come back as they arrive."""

from __future__ import annotations

import json

import pytest

from api.upstream_errors import upstream_error_to_api_error
from tests.upstreams.conftest import ANTHROPIC_BASE, ANTHROPIC_KEY, sse, text_request, trickled
from upstreams.providers import adapter_for
from upstreams.providers.anthropic import ANTHROPIC_VERSION
from upstreams.providers.base import MESSAGES, MESSAGES_COUNT_TOKENS, TextRequest, UpstreamError

pytestmark = pytest.mark.django_db

MESSAGES_URL = f"{ANTHROPIC_BASE}/messages"
COUNT_URL = f"{ANTHROPIC_BASE}/messages/count_tokens"
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}


def sent_headers(mocked):
    return mocked.calls[-1].request.headers


def call(upstream, operation, **kwargs):
    with adapter_for(upstream).call(operation, text_request(operation, BODY, **kwargs)) as reply:
        return reply.status, reply.body


def test_it_sends_the_key_as_x_api_key_and_never_as_authorization(anthropic_upstream, mocked):
    mocked.post(MESSAGES_URL, json={})
    call(anthropic_upstream, MESSAGES)
    headers = sent_headers(mocked)
    assert headers["x-api-key"] == ANTHROPIC_KEY
    assert "Authorization" not in headers
    assert headers["Content-Type"] == "application/json"
    assert headers["Accept"] == "application/json"


def test_it_sends_its_default_anthropic_version(anthropic_upstream, mocked):
    mocked.post(MESSAGES_URL, json={})
    call(anthropic_upstream, MESSAGES)
    assert sent_headers(mocked)["anthropic-version"] == ANTHROPIC_VERSION == "2023-06-01"
    assert "anthropic-beta" not in sent_headers(mocked)


def test_it_sends_the_callers_anthropic_version_instead(anthropic_upstream, mocked):
    mocked.post(MESSAGES_URL, json={})
    call(anthropic_upstream, MESSAGES, headers={"anthropic-version": "2024-01-01"})
    assert sent_headers(mocked)["anthropic-version"] == "2024-01-01"


def test_it_forwards_the_callers_anthropic_beta(anthropic_upstream, mocked):
    mocked.post(COUNT_URL, json={"input_tokens": 3})
    beta = "token-counting-2024-11-01,prompt-caching-2024-07-31"
    call(anthropic_upstream, MESSAGES_COUNT_TOKENS, headers={"anthropic-beta": beta})
    assert sent_headers(mocked)["anthropic-beta"] == beta


@pytest.mark.parametrize("value", ["", " 2023-06-01", "2023-06-01\r\nx-evil: 1"])
def test_a_header_value_that_cannot_be_sent_is_the_callers_400_without_any_call(
    anthropic_upstream, mocked, value
):
    request = text_request(MESSAGES, BODY, headers={"anthropic-beta": value})
    with pytest.raises(UpstreamError) as info:
        adapter_for(anthropic_upstream).call(MESSAGES, request)
    assert (info.value.status, info.value.retryable, info.value.sent) == (400, False, False)
    api_error = upstream_error_to_api_error(error=info.value, upstream=anthropic_upstream)
    assert api_error.status == 400 and "anthropic-beta" in api_error.message
    assert len(mocked.calls) == 0


@pytest.mark.parametrize("operation, url", [(MESSAGES, MESSAGES_URL), (MESSAGES_COUNT_TOKENS, COUNT_URL)])
def test_it_posts_the_body_byte_for_byte_to_the_operations_url(anthropic_upstream, mocked, operation, url):
    body = b'{"model":"claude","messages":[{"role":"user","content":"\xc3\xa9t\xc3\xa9"}],  "max_tokens":5}'
    mocked.post(url, json={"input_tokens": 9})
    with adapter_for(anthropic_upstream).call(
        operation, TextRequest(operation=operation, body=body, stream=False)
    ) as reply:
        assert (reply.status, json.loads(reply.body)) == (200, {"input_tokens": 9})
    sent = mocked.calls[0].request
    assert (sent.method, sent.url, sent.body) == ("POST", url, body)


def test_a_token_count_is_never_streamed(anthropic_upstream, mocked):
    mocked.post(COUNT_URL, json={"input_tokens": 9})
    with adapter_for(anthropic_upstream).call(
        MESSAGES_COUNT_TOKENS, text_request(MESSAGES_COUNT_TOKENS, BODY, stream=True)
    ) as reply:
        assert (reply.events, json.loads(reply.body)) == (None, {"input_tokens": 9})
    assert sent_headers(mocked)["Accept"] == "application/json"


@pytest.mark.parametrize("step", [1, 11, 100_000])
def test_a_message_stream_yields_each_named_event_as_anthropic_sends_it(anthropic_upstream, mocked, step):
    events = [
        (
            "message_start",
            {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 9}}},
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"text": "Hé 😀"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    mocked.post(MESSAGES_URL, body=trickled(sse(*events), step), content_type="text/event-stream")
    with adapter_for(anthropic_upstream).call(MESSAGES, text_request(MESSAGES, BODY, stream=True)) as reply:
        received = [(e.event, json.loads(e.data)) for e in reply.events]
    assert received == events
    assert sent_headers(mocked)["Accept"] == "text/event-stream"


def test_an_error_event_mid_stream_is_yielded_for_the_endpoint_to_judge(anthropic_upstream, mocked):
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body = sse(("message_start", {"type": "message_start"}), ("error", error))
    mocked.post(MESSAGES_URL, body=body, content_type="text/event-stream")
    with adapter_for(anthropic_upstream).call(MESSAGES, text_request(MESSAGES, BODY, stream=True)) as reply:
        assert [e.event for e in reply.events] == ["message_start", "error"]
