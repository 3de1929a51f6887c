"""A streamed text call holds no database connection while its events are relayed: the pool lends one
to the reserve before the upstream is opened and to the capture after the final event, so streams
open at once are not capped by the pool's size (docs/text.md; the bench's many-streams scenarios show
it with 2,000 streams on 32 connections)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.db import connection

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from tests.chat.conftest import OPENAI_BASE, sse_body
from tests.markers import POOLED_POSTGRES
from tests.upstreams.conftest import event_by_event

pytestmark = [
    *POOLED_POSTGRES,
    pytest.mark.django_db(transaction=True),  # the connection can only be given back outside a transaction
]

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
COST = Decimal("0.00036")  # 100 x 2 + 20 x 8 per million


def chunk(**fields):
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "vendor-chat-1", **fields}


def test_an_open_stream_holds_no_database_connection_between_its_events(
    client, upstream, chat_model, tara, tara_key
):
    deltas = [
        chunk(choices=[{"index": 0, "delta": {"content": f"w{i} "}, "finish_reason": None}]) for i in range(5)
    ]
    body = sse_body(
        *[("", delta) for delta in deltas],
        ("", chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])),
        ("", chunk(choices=[], usage=USAGE)),
        ("", "[DONE]"),
    )
    # One event per read of the upstream, so each goes to the caller on its own.
    upstream.post(
        f"{OPENAI_BASE}/chat/completions", body=event_by_event(body), content_type="text/event-stream"
    )
    before = Wallet.objects.get(account=tara).balance
    connection.close()

    response = client.post(
        "/v1/chat/completions",
        data=json.dumps(
            {"model": "alpha-chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        ),
        content_type="application/json",
        headers={"Authorization": f"Bearer {tara_key}"},
    )
    assert response.status_code == 200
    held, pieces = [], []
    for piece in response.streaming_content:  # the test's thread is the request's: same connection
        held.append(connection.connection is not None)
        pieces.append(piece)
        assert Hold.objects.filter(status=Hold.Status.OPEN).count() == 1
        connection.close()  # the check above borrowed one: give it back before the stream goes on

    assert held == [False] * 7
    assert b"".join(pieces).count(b"data: ") == 7  # the usage chunk, not asked for, held back
    # Reserved before the first event, charged once after the last, on connections borrowed for that.
    assert Wallet.objects.get(account=tara).balance == before - COST
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert UsageRecord.objects.get().amount == COST
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
