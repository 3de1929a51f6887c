"""`/v1/chat/completions` on a model whose upstream is Anthropic's Messages API, through the Django
client with the provider behind `responses`: the body sent is translated, the answer and its errors
come back as Chat Completions gives them, streamed chunk by chunk, and the wallet moves by exactly the
cost of the usage Anthropic reported (cache reads and writes priced apart; nothing for a refusal or a
cut stream)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.chat.conftest import ANTHROPIC_BASE, PROVIDER_KEY, messages_events, sent_json, sse_body

pytestmark = pytest.mark.django_db

MESSAGES_URL = f"{ANTHROPIC_BASE}/messages"
# claude_model's prices per million tokens (tests/chat/conftest.py).
INPUT, OUTPUT, CACHED, CACHE_WRITE = Decimal("3.00"), Decimal("15.00"), Decimal("0.30"), Decimal("3.75")
USAGE = {
    "input_tokens": 40,
    "cache_read_input_tokens": 100,
    "cache_creation_input_tokens": 20,
    "output_tokens": 30,
}
COST = (40 * INPUT + 100 * CACHED + 20 * CACHE_WRITE + 30 * OUTPUT) / Decimal(1_000_000)


def post(client, body, key):
    return client.post(
        "/v1/chat/completions",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def test_a_chat_call_is_translated_both_ways_and_charged_exactly(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(
        MESSAGES_URL,
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "Bonjour"}],
            "stop_reason": "end_turn",
            "usage": USAGE,
        },
    )
    before = balance(tara)
    response = post(
        client,
        {
            "model": "alpha-claude",
            "messages": [{"role": "system", "content": "French."}, {"role": "user", "content": "Hello"}],
            "max_tokens": 50,
            "user": "u-1",
        },
        tara_key,
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "alpha-claude"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Bonjour"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 160 and body["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 100
    }
    sent = sent_json(upstream.calls[0])
    assert sent == {
        "model": "vendor-claude-1",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
        "system": "French.",
        "metadata": {"user_id": "u-1"},
    }
    assert upstream.calls[0].request.headers["x-api-key"] == PROVIDER_KEY
    assert balance(tara) == before - COST
    record = UsageRecord.objects.get()
    assert (record.status, record.amount, record.endpoint) == (200, COST, "chat.completions")
    assert (record.input_tokens, record.cached_tokens, record.cache_write_tokens, record.output_tokens) == (
        40,
        100,
        20,
        30,
    )
    assert ledger_check() == []


def anthropic_stream() -> str:
    return sse_body(
        *messages_events(
            message={"id": "msg_2", "content": [], "usage": {**USAGE, "output_tokens": 1}},
            tool_use={"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
            arguments='{"city":"Oslo"}',
            stop_reason="tool_use",
            output_tokens=30,
        )
    )


def chunks(response) -> list:
    text = b"".join(response.streaming_content).decode()
    out = []
    for block in text.strip().split("\n\n"):
        data = block.removeprefix("data: ")
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


@pytest.mark.parametrize("usage_asked", [True, False])
def test_a_chat_stream_is_translated_chunk_by_chunk_and_charged_exactly(
    client, upstream, claude_model, tara, tara_key, usage_asked
):
    upstream.post(MESSAGES_URL, body=anthropic_stream(), content_type="text/event-stream")
    before = balance(tara)
    body = {
        "model": "alpha-claude",
        "messages": [{"role": "user", "content": "Weather?"}],
        "stream": True,
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        ],
    }
    if usage_asked:
        body["stream_options"] = {"include_usage": True}
    response = post(client, body, tara_key)

    assert response.status_code == 200
    got = chunks(response)
    assert got[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"] for c in got[:-1] if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content") or "" for d in deltas) == "Hi"
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert (
        calls[0]["id"] == "toolu_1"
        and "".join(c["function"]["arguments"] for c in calls) == '{"city":"Oslo"}'
    )
    usage_chunks = [c for c in got[:-1] if not c["choices"]]
    assert len(usage_chunks) == (1 if usage_asked else 0)
    assert "stream_options" not in sent_json(upstream.calls[0])
    assert balance(tara) == before - COST
    assert UsageRecord.objects.get().amount == COST
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert not Hold.objects.filter(status="open").exists()
    assert ledger_check() == []


def test_a_stream_anthropic_cuts_costs_nothing_and_ends_with_the_chat_error_chunk(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(
        MESSAGES_URL,
        body=anthropic_stream().split("event: message_delta")[0],
        content_type="text/event-stream",
    )
    before = balance(tara)
    response = post(
        client,
        {"model": "alpha-claude", "messages": [{"role": "user", "content": "x"}], "stream": True},
        tara_key,
    )

    got = chunks(response)
    assert "error" in got[-1] and "nothing was charged" in got[-1]["error"]["message"]
    assert balance(tara) == before
    assert UsageRecord.objects.get().amount == 0
    assert Hold.objects.get().status == "released"


def test_an_anthropic_refusal_keeps_its_status_and_message_in_the_chat_shape(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(
        MESSAGES_URL,
        status=400,
        json={
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "prompt is too long: 300000 tokens"},
        },
    )
    response = post(
        client, {"model": "alpha-claude", "messages": [{"role": "user", "content": "x"}]}, tara_key
    )

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "prompt is too long: 300000 tokens",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert UsageRecord.objects.get().amount == 0


def test_n_above_one_is_a_400_naming_the_field_and_nothing_is_sent(
    client, upstream, claude_model, tara, tara_key
):
    response = post(
        client, {"model": "alpha-claude", "messages": [{"role": "user", "content": "x"}], "n": 2}, tara_key
    )

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "n"
    assert len(upstream.calls) == 0
    assert not Hold.objects.exists()
