"""`/v1/messages` on a model whose upstream speaks only Chat Completions (`openai-compatible`), through
the Django client with the provider behind `responses`: the body sent is translated, the answer and
its errors come back in Anthropic's shapes, streamed event by event, and the wallet moves by exactly
the cost of the usage the upstream reported (none for a refusal or a cut stream)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import tiktoken

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.chat.conftest import KEY_ENV, OPENAI_BASE, PROVIDER_KEY, sent_json, sse_body
from tests.factories import text_model_make, upstream_make

pytestmark = pytest.mark.django_db

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
# The prices of `alpha-deepseek` (tests/chat/conftest.py), per million tokens.
INPUT, CACHED, OUTPUT = Decimal("2.00"), Decimal("0.50"), Decimal("8.00")
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def post(client, body, key, *, stream=False):
    return client.post(
        "/v1/messages",
        data=json.dumps({**body, "stream": True} if stream else body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"},
    )


def cost(*, prompt: int, cached: int, completion: int) -> Decimal:
    return ((prompt - cached) * INPUT + cached * CACHED + completion * OUTPUT) / Decimal(1_000_000)


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def events_of(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.split("\n\n"):
        if block.strip():
            name, data = block.split("\n", 1)
            out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


# Within the hold of the calls below (the ceiling of a short prompt and max_tokens 300).
USAGE = {"prompt_tokens": 1200, "completion_tokens": 345, "prompt_tokens_details": {"cached_tokens": 200}}
SMALL_USAGE = {"prompt_tokens": 120, "completion_tokens": 34, "prompt_tokens_details": {"cached_tokens": 20}}


def test_a_messages_call_is_translated_both_ways_and_charged_exactly(
    client, upstream, deepseek, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        json={
            "id": "chatcmpl-9",
            "object": "chat.completion",
            "model": "deepseek-chat",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "Let me look.",
                        "tool_calls": [
                            {
                                "id": "call_7",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": USAGE,
        },
    )
    before = balance(tara)
    response = post(
        client,
        {
            "model": "alpha-deepseek",
            "max_tokens": 300,
            "system": "Be brief.",
            "tools": [WEATHER_TOOL],
            "messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "metadata": {"user_id": "session-1"},
        },
        tara_key,
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["type"] == "message" and body["model"] == "alpha-deepseek"
    assert body["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_7", "name": "get_weather", "input": {"city": "Oslo"}},
    ]
    assert body["stop_reason"] == "tool_use"
    assert body["usage"] == {
        "input_tokens": 1000,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 200,
        "output_tokens": 345,
    }
    sent = sent_json(upstream.calls[0])
    assert sent["model"] == "deepseek-chat" and sent["max_tokens"] == 300 and sent["user"] == "session-1"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
    ]
    assert sent["tools"][0]["function"]["parameters"] == WEATHER_TOOL["input_schema"]
    assert "anthropic-version" not in upstream.calls[0].request.headers
    assert upstream.calls[0].request.headers["Authorization"] == f"Bearer {PROVIDER_KEY}"
    charged = cost(prompt=1200, cached=200, completion=345)
    assert balance(tara) == before - charged
    record = UsageRecord.objects.get()
    assert (record.status, record.amount, record.endpoint) == (200, charged, "messages")
    assert (record.input_tokens, record.cached_tokens, record.output_tokens) == (1000, 200, 345)
    assert Hold.objects.get().status == "captured"
    assert ledger_check() == []


def chunk(delta=None, finish=None, usage=None) -> dict:
    body = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "model": "deepseek-chat"}
    body["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = usage
    return body


def test_a_messages_stream_is_translated_event_by_event_and_charged_exactly(
    client, upstream, deepseek, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        body=sse_body(
            ("", chunk({"role": "assistant", "content": ""})),
            ("", chunk({"content": "Hel"})),
            ("", chunk({"content": "lo"})),
            (
                "",
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "function": {"name": "get_weather", "arguments": '{"ci'},
                            }
                        ]
                    }
                ),
            ),
            ("", chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Rome"}'}}]})),
            ("", chunk({}, finish="tool_calls")),
            ("", chunk(usage=SMALL_USAGE)),
            ("", "[DONE]"),
        ),
        content_type="text/event-stream",
    )
    before = balance(tara)
    response = post(
        client,
        {"model": "alpha-deepseek", "max_tokens": 300, "messages": [{"role": "user", "content": "Hi"}]},
        tara_key,
        stream=True,
    )

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    events = events_of(b"".join(response.streaming_content).decode())
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert (
        "".join(
            d["delta"]["partial_json"]
            for n, d in events
            if d.get("delta", {}).get("type") == "input_json_delta"
        )
        == '{"city": "Rome"}'
    )
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"]["output_tokens"] == 34
    assert sent_json(upstream.calls[0])["stream_options"] == {"include_usage": True}
    charged = cost(prompt=120, cached=20, completion=34)
    record = UsageRecord.objects.get()
    assert (record.input_tokens, record.cached_tokens, record.output_tokens) == (100, 20, 34)
    assert balance(tara) == before - charged
    assert record.amount == charged
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert not Hold.objects.filter(status="open").exists()
    assert ledger_check() == []


def test_a_stream_the_upstream_cuts_costs_nothing_and_ends_with_the_messages_error_event(
    client, upstream, deepseek, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        body=sse_body(("", chunk({"role": "assistant", "content": "Hel"})), ("", chunk({"content": "lo"}))),
        content_type="text/event-stream",
    )
    before = balance(tara)
    response = post(
        client,
        {"model": "alpha-deepseek", "max_tokens": 300, "messages": [{"role": "user", "content": "Hi"}]},
        tara_key,
        stream=True,
    )

    events = events_of(b"".join(response.streaming_content).decode())
    assert events[0][0] == "message_start"
    assert events[-1] == ("error", events[-1][1])
    assert events[-1][1]["error"]["type"] == "api_error"
    assert "nothing was charged" in events[-1][1]["error"]["message"]
    assert balance(tara) == before
    assert UsageRecord.objects.get().amount == 0
    assert Hold.objects.get().status == "released"
    assert ledger_check() == []


def test_an_upstream_refusal_keeps_its_status_and_message_in_anthropics_shape(
    client, upstream, deepseek, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        status=400,
        json={
            "error": {
                "message": "This model's maximum context length is 65536 tokens",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        },
    )
    before = balance(tara)
    response = post(
        client,
        {"model": "alpha-deepseek", "max_tokens": 300, "messages": [{"role": "user", "content": "Hi"}]},
        tara_key,
    )

    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "This model's maximum context length is 65536 tokens",
        },
    }
    assert balance(tara) == before
    assert UsageRecord.objects.get().amount == 0


def test_what_chat_completions_cannot_express_is_a_400_naming_the_field_before_anything_is_sent(
    client, upstream, deepseek, tara, tara_key
):
    before = balance(tara)
    response = post(
        client,
        {
            "model": "alpha-deepseek",
            "max_tokens": 300,
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "messages": [{"role": "user", "content": "Search"}],
        },
        tara_key,
    )

    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["message"].startswith("tools[0]: The server tool 'web_search_20250305'")
    assert len(upstream.calls) == 0
    assert balance(tara) == before
    assert not Hold.objects.exists()


def test_a_compatible_server_without_a_key_is_sent_no_authorization(
    client, upstream, chat_group, tara, tara_key
):
    local = upstream_make(name="local-vllm", base_url=OPENAI_BASE, api_key_env="", kind="openai-compatible")
    text_model_make(model_id="alpha-local", group=chat_group, upstreams=[local], upstream_model="qwen")
    upstream.post(
        CHAT_URL,
        json={
            "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": USAGE,
        },
    )
    response = post(
        client,
        {"model": "alpha-local", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}]},
        tara_key,
    )

    assert response.status_code == 200, response.content
    assert response.json()["content"] == [{"type": "text", "text": "ok"}]
    assert "Authorization" not in upstream.calls[0].request.headers


def test_count_tokens_is_counted_by_the_gateway_free_and_without_a_call(
    client, upstream, deepseek, tara, tara_key
):
    body = {
        "model": "alpha-deepseek",
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "How many tokens is this sentence, more or less?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "12C"}]},
        ],
        "tools": [WEATHER_TOOL],
    }
    before = balance(tara)
    response = client.post(
        "/v1/messages/count_tokens",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {tara_key}"},
    )

    assert response.status_code == 200, response.content
    encoding = tiktoken.get_encoding("o200k_base")

    def tokens(*texts: str) -> int:
        return sum(len(encoding.encode_ordinary(text)) for text in texts)

    tools = json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": WEATHER_TOOL["input_schema"],
                    "description": "Get the weather",
                },
            }
        ],
        separators=(",", ":"),
    )
    expected = (
        3  # the answer's start
        + 4 * 3  # four messages
        + tokens("system", "You are terse.")
        + tokens("user", "How many tokens is this sentence, more or less?")
        + tokens("assistant", "t1", "function", "get_weather", '{"city":"Oslo"}')
        + tokens("tool", "t1", "12C")
        + tokens(tools)
    )
    assert response.json() == {"input_tokens": expected}
    assert len(upstream.calls) == 0
    assert balance(tara) == before
    record = UsageRecord.objects.get()
    assert (record.endpoint, record.status, record.amount) == ("messages.count_tokens", 200, 0)
    assert not Hold.objects.exists()


def test_count_tokens_refuses_what_the_model_could_not_read(client, upstream, deepseek, tara, tara_key):
    body = {
        "model": "alpha-deepseek",
        "messages": [
            {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}
        ],
    }
    response = client.post(
        "/v1/messages/count_tokens",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {tara_key}"},
    )

    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["message"].startswith("messages[0].content[0]: ")
    assert len(upstream.calls) == 0


@pytest.fixture
def claude_then_deepseek(chat_group, monkeypatch, settings):
    """A model served by Anthropic first and an OpenAI-compatible server second: failover crosses kinds."""
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.0, "max_retries": 1}
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    anthropic = upstream_make(
        name="anthropic-first",
        base_url="https://api.anthropic.test/v1",
        api_key_env=KEY_ENV,
        kind="anthropic",
    )
    compatible = upstream_make(
        name="deepseek-second", base_url=OPENAI_BASE, api_key_env=KEY_ENV, kind="openai-compatible"
    )
    anthropic.priority, compatible.priority = 0, 1
    anthropic.save(update_fields=["priority"])
    compatible.save(update_fields=["priority"])
    return text_model_make(
        model_id="alpha-failover",
        group=chat_group,
        upstreams=[anthropic, compatible],
        upstream_model="shared-name",
        cached_input_price=str(CACHED),
        max_output_tokens=1000,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_failover_crosses_kinds_each_attempt_sent_its_kinds_body(
    client, upstream, claude_then_deepseek, tara, tara_key, stream
):
    upstream.post(
        "https://api.anthropic.test/v1/messages",
        status=529,
        json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    if stream:
        upstream.post(
            CHAT_URL,
            body=sse_body(
                ("", chunk({"role": "assistant", "content": "Hi"})),
                ("", chunk({}, finish="stop")),
                ("", chunk(usage=SMALL_USAGE)),
                ("", "[DONE]"),
            ),
            content_type="text/event-stream",
        )
    else:
        upstream.post(
            CHAT_URL,
            json={
                "choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
                "usage": SMALL_USAGE,
            },
        )
    before = balance(tara)
    body = {
        "model": "alpha-failover",
        "max_tokens": 100,
        "system": "Terse.",
        "messages": [{"role": "user", "content": "Hello"}],
    }
    response = post(client, body, tara_key, stream=stream)

    assert response.status_code == 200, response.content if not stream else ""
    if stream:
        events = events_of(b"".join(response.streaming_content).decode())
        assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    else:
        assert response.json()["content"] == [{"type": "text", "text": "Hi"}]
    first, second = (json.loads(call.request.body) for call in upstream.calls)
    assert first["system"] == "Terse." and first["messages"] == [{"role": "user", "content": "Hello"}]
    assert second["messages"] == [
        {"role": "system", "content": "Terse."},
        {"role": "user", "content": "Hello"},
    ]
    assert balance(tara) == before - cost(prompt=120, cached=20, completion=34)
    record = UsageRecord.objects.get()
    assert (record.upstream, record.amount) == ("deepseek-second", cost(prompt=120, cached=20, completion=34))
    assert ledger_check() == []
