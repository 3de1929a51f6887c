"""What a text call makes of each upstream answer, the same for every kind and operation: a 2xx or a
4xx about the request is a TextReply (the body read whole even when a stream was asked), 429 and 5xx
(Anthropic's 529 included) are retryable UpstreamErrors, 401/403 are not, a streamed 2xx must be an
event stream, and a transfer broken mid-stream is an error whose outcome is unknown."""

from __future__ import annotations

import json

import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError

from tests.upstreams.conftest import ANTHROPIC_BASE, OPENAI_BASE, sse, text_request
from upstreams.providers import adapter_for
from upstreams.providers.base import (
    CHAT_COMPLETIONS,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    RESPONSES,
    UpstreamError,
)

pytestmark = pytest.mark.django_db

CALLS = {
    CHAT_COMPLETIONS: ("openai_upstream", f"{OPENAI_BASE}/chat/completions"),
    RESPONSES: ("openai_upstream", f"{OPENAI_BASE}/responses"),
    MESSAGES: ("anthropic_upstream", f"{ANTHROPIC_BASE}/messages"),
    MESSAGES_COUNT_TOKENS: ("anthropic_upstream", f"{ANTHROPIC_BASE}/messages/count_tokens"),
}
STREAMED = [CHAT_COMPLETIONS, RESPONSES, MESSAGES]
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(params=list(CALLS))
def call(request):
    """(operation, adapter, url) for each kind and operation."""
    fixture, url = CALLS[request.param]
    return request.param, adapter_for(request.getfixturevalue(fixture)), url


@pytest.fixture(params=STREAMED)
def streamed_call(request):
    fixture, url = CALLS[request.param]
    return request.param, adapter_for(request.getfixturevalue(fixture)), url


def test_a_2xx_is_a_reply_with_the_whole_body(call, mocked):
    operation, adapter, url = call
    mocked.post(url, body=b'{"id": "x"}', content_type="application/json; charset=utf-8")
    with adapter.call(operation, text_request(operation, BODY)) as reply:
        assert (reply.status, reply.content_type, reply.body) == (
            200,
            "application/json; charset=utf-8",
            b'{"id": "x"}',
        )
        assert reply.events is None


def test_a_streamed_2xx_yields_its_events_and_closes_at_the_end(streamed_call, mocked):
    operation, adapter, url = streamed_call
    mocked.post(url, body=sse(("a", {"n": 1}), ("", "[DONE]")), content_type="text/event-stream")
    reply = adapter.call(operation, text_request(operation, BODY, stream=True))
    assert (reply.status, reply.content_type, reply.body) == (200, "text/event-stream", b"")
    assert [(e.event, e.data) for e in reply.events] == [("a", '{"n": 1}'), ("", "[DONE]")]
    reply.close()
    reply.close()  # safe twice


def test_a_streamed_2xx_that_is_not_an_event_stream_is_a_retryable_502(streamed_call, mocked):
    operation, adapter, url = streamed_call
    mocked.post(url, json={"id": "x"})
    with pytest.raises(UpstreamError) as info:
        adapter.call(operation, text_request(operation, BODY, stream=True))
    assert (info.value.status, info.value.retryable, info.value.sent) == (502, True, True)


@pytest.mark.parametrize("status", [400, 404, 409, 413, 422])
@pytest.mark.parametrize("stream", [False, True])
def test_a_4xx_about_the_request_is_a_reply_with_the_upstreams_body(call, mocked, status, stream):
    operation, adapter, url = call
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad field"}}
    mocked.post(url, json=error, status=status)
    with adapter.call(operation, text_request(operation, BODY, stream=stream)) as reply:
        assert (reply.status, reply.events) == (status, None)
        assert reply.content_type == "application/json"
        assert json.loads(reply.body) == error


def test_a_429_is_retryable_with_its_retry_after(call, mocked):
    operation, adapter, url = call
    mocked.post(url, json={"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"})
    with pytest.raises(UpstreamError) as info:
        adapter.call(operation, text_request(operation, BODY))
    error = info.value
    assert (error.status, error.retryable, error.sent, error.retry_after) == (429, True, True, 7.0)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529])
def test_a_5xx_is_retryable_with_its_parsed_body(call, mocked, status):
    operation, adapter, url = call
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    mocked.post(url, json=overloaded, status=status)
    with pytest.raises(UpstreamError) as info:
        adapter.call(operation, text_request(operation, BODY, stream=operation != MESSAGES_COUNT_TOKENS))
    error = info.value
    assert (error.status, error.retryable, error.sent, error.body) == (status, True, True, overloaded)


def test_a_5xx_that_is_not_json_carries_a_bounded_piece_of_its_text(call, mocked):
    operation, adapter, url = call
    mocked.post(url, body="<html>" + "x" * 10_000, status=502, content_type="text/html")
    with pytest.raises(UpstreamError) as info:
        adapter.call(operation, text_request(operation, BODY))
    assert info.value.body.startswith("<html>") and len(info.value.body) == 4000


@pytest.mark.parametrize("status", [401, 403])
def test_the_gateways_key_refused_is_not_retryable(call, mocked, status):
    operation, adapter, url = call
    mocked.post(
        url, json={"error": {"type": "authentication_error", "message": "invalid x-api-key"}}, status=status
    )
    with pytest.raises(UpstreamError) as info:
        adapter.call(operation, text_request(operation, BODY))
    error = info.value
    assert (error.status, error.retryable, error.sent) == (status, False, True)
    assert error.body["error"]["message"] == "invalid x-api-key"


def test_a_refused_connection_is_retryable_and_not_sent(call, mocked):
    operation, adapter, url = call
    refused = requests.ConnectionError(
        MaxRetryError(None, url, NewConnectionError(None, "Connection refused"))
    )
    mocked.post(url, body=refused)
    with pytest.raises(UpstreamError) as info:
        adapter.call(operation, text_request(operation, BODY))
    assert (info.value.status, info.value.retryable, info.value.sent) == (None, True, False)


def test_an_unset_key_is_a_misconfigured_upstream_without_any_call(call, mocked, monkeypatch):
    operation, adapter, _ = call
    monkeypatch.delenv(adapter.upstream.api_key_env)
    with pytest.raises(UpstreamError) as info:
        adapter.call(operation, text_request(operation, BODY))
    assert (info.value.retryable, info.value.sent) == (True, False)
    assert len(mocked.calls) == 0


@pytest.mark.parametrize("kind, operation", [("openai", CHAT_COMPLETIONS), ("anthropic", MESSAGES)])
def test_a_transfer_broken_mid_stream_raises_with_the_outcome_unknown(raw_upstream, kind, operation):
    first = sse(("message_start", {"type": "message_start"}))
    upstream = raw_upstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(first):x}\r\n".encode()
        + first
        + b"\r\n400\r\nevent: content_block_del",  # a chunk of 1024 bytes that never completes
        kind=kind,
    )
    with adapter_for(upstream).call(operation, text_request(operation, BODY, stream=True)) as reply:
        events = reply.events
        assert next(events).event == "message_start"
        with pytest.raises(UpstreamError) as info:
            next(events)
    assert (info.value.status, info.value.outcome_unknown, info.value.retryable) == (502, True, False)


def test_a_stream_that_ends_mid_event_just_ends(streamed_call, mocked):
    operation, adapter, url = streamed_call
    body = sse(("a", {"n": 1})) + b'event: b\ndata: {"n":'
    mocked.post(url, body=body, content_type="text/event-stream")
    with adapter.call(operation, text_request(operation, BODY, stream=True)) as reply:
        assert [e.event for e in reply.events] == ["a"]


def test_closing_a_reply_before_its_events_are_read_ends_them(streamed_call, mocked):
    operation, adapter, url = streamed_call
    mocked.post(url, body=sse(("a", {"n": 1}), ("b", {"n": 2})), content_type="text/event-stream")
    reply = adapter.call(operation, text_request(operation, BODY, stream=True))
    assert next(reply.events).event == "a"
    reply.close()
    assert list(reply.events) == []
