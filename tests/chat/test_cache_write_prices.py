"""Anthropic's one-hour cache writes, priced apart from five-minute ones: a text model's
`cache_write_1h_price` (by default twice the input price, as Anthropic lists it) applies to
`usage.cache_creation.ephemeral_1h_input_tokens`; the usage record keeps the total writes and the
one-hour part; the hold's ceiling uses the highest input-side price. Over /v1/messages (plain and
streamed) and through the chat translator, against `responses` at the HTTP boundary."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.models import UsageRecord, Wallet
from billing.selectors import ledger_check
from chat.pricing import text_call_ceiling
from chat.selectors import group_text_models_enabled
from tests.chat.conftest import ANTHROPIC_BASE, sse_body
from tests.factories import text_model_make

pytestmark = pytest.mark.django_db

MESSAGES_URL = f"{ANTHROPIC_BASE}/messages"
USAGE = {
    "input_tokens": 40,
    "cache_read_input_tokens": 100,
    "cache_creation_input_tokens": 50,
    "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30},
    "output_tokens": 10,
}
# claude_model (tests/chat/conftest.py): input 3.00, cache reads 0.30, five-minute writes 3.75,
# output 15.00; one-hour writes unset, so twice the input price: 6.00.
COST = (
    40 * Decimal("3.00")
    + 100 * Decimal("0.30")
    + 20 * Decimal("3.75")
    + 30 * Decimal("6.00")
    + 10 * Decimal("15.00")
) / Decimal(1_000_000)


def post(client, path, body, key):
    return client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def test_one_hour_writes_are_charged_at_their_own_price_and_kept_on_the_record(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(
        MESSAGES_URL,
        json={"id": "msg_1", "type": "message", "content": [], "stop_reason": "end_turn", "usage": USAGE},
    )
    before = balance(tara)

    response = post(
        client,
        "/v1/messages",
        {"model": "alpha-claude", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]},
        tara_key,
    )

    assert response.status_code == 200, response.content
    assert balance(tara) == before - COST
    record = UsageRecord.objects.get()
    assert (record.amount, record.cache_write_tokens, record.cache_write_1h_tokens) == (COST, 50, 30)
    assert ledger_check() == []


def test_a_stream_reads_the_buckets_from_message_start(client, upstream, claude_model, tara, tara_key):
    upstream.post(
        MESSAGES_URL,
        body=sse_body(
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {"id": "m", "content": [], "usage": {**USAGE, "output_tokens": 1}},
                },
            ),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 10},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ),
        content_type="text/event-stream",
    )
    before = balance(tara)
    body = {
        "model": "alpha-claude",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }

    response = post(client, "/v1/messages", body, tara_key)
    b"".join(response.streaming_content)

    assert balance(tara) == before - COST
    assert UsageRecord.objects.get().cache_write_1h_tokens == 30


def test_the_chat_translator_keeps_the_one_hour_writes_for_the_charge(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(
        MESSAGES_URL,
        json={
            "id": "msg_1",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": USAGE,
        },
    )
    before = balance(tara)

    response = post(
        client,
        "/v1/chat/completions",
        {"model": "alpha-claude", "messages": [{"role": "user", "content": "x"}]},
        tara_key,
    )

    assert response.status_code == 200, response.content
    assert balance(tara) == before - COST
    assert UsageRecord.objects.get().cache_write_1h_tokens == 30


def test_the_one_hour_price_is_set_or_twice_the_input_and_the_ceiling_uses_the_highest(
    chat_group, demo_upstream
):
    text_model_make(
        model_id="set",
        group=chat_group,
        upstreams=[demo_upstream],
        input_price="3.00",
        cache_write_1h_price="9.00",
    )
    text_model_make(model_id="unset", group=chat_group, upstreams=[demo_upstream], input_price="3.00")
    models = group_text_models_enabled(group_id=chat_group.pk)

    assert models["set"].cache_write_1h_price == Decimal("9.00")
    assert models["unset"].cache_write_1h_price == Decimal("6.00")
    # 1,000 input tokens at 9.00 and 100 output tokens at 8.00, per million.
    assert text_call_ceiling(text_model=models["set"], input_tokens=1000, output_tokens=100) == Decimal(
        "0.0098"
    )
