"""`/v1/responses` on a model whose upstream speaks only Chat Completions (`openai-compatible`),
through the Django client with the provider behind `responses`: the body sent is translated, the
answer comes back as a Responses object, a stream as Responses events, and the wallet moves by
exactly the cost of the usage the upstream reported (nothing for a refusal or a cut stream)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.chat.conftest import OPENAI_BASE, sent_json, sse_body
from tests.chat.conftest import responses_post as post

pytestmark = pytest.mark.django_db

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
USAGE = {"prompt_tokens": 120, "completion_tokens": 34, "prompt_tokens_details": {"cached_tokens": 20}}
COST = (100 * Decimal("2.00") + 20 * Decimal("0.50") + 34 * Decimal("8.00")) / Decimal(1_000_000)
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def test_a_responses_call_is_translated_both_ways_and_charged_exactly(
    client, upstream, deepseek, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        json={
            "choices": [
                {
                    "message": {
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
            "instructions": "Terse.",
            "input": "Weather?",
            "tools": [WEATHER],
            "store": False,
        },
        tara_key,
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (
        body["object"] == "response" and body["status"] == "completed" and body["model"] == "alpha-deepseek"
    )
    assert [(i["type"], i["call_id"], i["name"]) for i in body["output"]] == [
        ("function_call", "call_1", "get_weather")
    ]
    assert body["usage"]["input_tokens"] == 120 and body["usage"]["output_tokens"] == 34
    sent = sent_json(upstream.calls[0])
    assert sent["messages"] == [
        {"role": "system", "content": "Terse."},
        {"role": "user", "content": "Weather?"},
    ]
    assert "store" not in sent
    assert balance(tara) == before - COST
    record = UsageRecord.objects.get()
    assert (record.endpoint, record.amount, record.input_tokens, record.cached_tokens) == (
        "responses",
        COST,
        100,
        20,
    )
    assert ledger_check() == []


def test_a_responses_stream_is_translated_event_by_event_and_charged_exactly(
    client, upstream, deepseek, tara, tara_key
):
    def chunk(delta=None, finish=None, usage=None):
        body = {"choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return {**body, "usage": usage} if usage else body

    upstream.post(
        CHAT_URL,
        body=sse_body(
            ("", chunk({"role": "assistant", "content": ""})),
            ("", chunk({"content": "Hi"})),
            ("", chunk({"content": " there"})),
            ("", chunk({}, finish="stop")),
            ("", chunk(usage=USAGE)),
            ("", "[DONE]"),
        ),
        content_type="text/event-stream",
    )
    before = balance(tara)
    response = post(client, {"model": "alpha-deepseek", "input": "Hi", "stream": True}, tara_key)

    assert response.status_code == 200
    text = b"".join(response.streaming_content).decode()
    events = [json.loads(block.split("\ndata: ", 1)[1]) for block in text.strip().split("\n\n")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Hi there"
    assert events[-1]["response"]["usage"]["output_tokens"] == 34
    assert balance(tara) == before - COST
    assert UsageRecord.objects.get().amount == COST
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert not Hold.objects.filter(status="open").exists()


def test_a_server_tool_is_a_400_naming_it_and_nothing_is_sent(client, upstream, deepseek, tara, tara_key):
    response = post(
        client,
        {"model": "alpha-deepseek", "input": "x", "tools": [WEATHER, {"type": "web_search"}]},
        tara_key,
    )

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools[1]"
    assert len(upstream.calls) == 0
    assert not Hold.objects.exists()


def test_a_responses_call_on_an_anthropic_model_goes_through_chat_completions_and_keeps_cache_writes(
    client, upstream, claude_model, tara, tara_key
):
    """Codex's API on Claude: Responses -> Chat Completions -> Messages, charged on Anthropic's usage."""
    usage = {
        "input_tokens": 40,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 20,
        "output_tokens": 30,
    }
    upstream.post(
        "https://api.anthropic.test/v1/messages",
        json={
            "id": "msg_1",
            "content": [{"type": "text", "text": "Bonjour"}],
            "stop_reason": "end_turn",
            "usage": usage,
        },
    )
    before = balance(tara)
    response = post(
        client,
        {"model": "alpha-claude", "instructions": "French.", "input": "Hello", "store": False},
        tara_key,
    )

    assert response.status_code == 200, response.content
    assert response.json()["output"][0]["content"][0]["text"] == "Bonjour"
    sent = sent_json(upstream.calls[0])
    assert (sent["system"], sent["messages"]) == (
        "French.",
        [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
    )
    # claude_model: 3.00 input, 0.30 cache reads, 3.75 cache writes, 15.00 output, per million tokens.
    cost = (
        40 * Decimal("3.00") + 100 * Decimal("0.30") + 20 * Decimal("3.75") + 30 * Decimal("15.00")
    ) / Decimal(1_000_000)
    assert balance(tara) == before - cost
    assert UsageRecord.objects.get().cache_write_tokens == 20
    assert ledger_check() == []
