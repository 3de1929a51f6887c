"""A key's budget under real concurrency for streamed text calls, the whole request path: PostgreSQL
(and Redis for the limits when REDIS_URL is set), real threads. A call is admitted by its ceiling
and keeps only its actual cost: 50 streams at once on a key with room for exactly 5 ceilings serve
exactly 5, and the window ends at the 5 actual costs."""

from __future__ import annotations

import json
import threading

import pytest
from django.test import Client

from billing.models import Hold, KeyBudgetUsage, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from keys.services import ApiKeyLimitsInput, api_key_create
from tests.billing.conftest import postgres_only, run_concurrently
from tests.chat.conftest import OPENAI_BASE
from tests.chat.test_text_streams import CHAT_COST, chat_stream_body

pytestmark = [pytest.mark.postgres, postgres_only, pytest.mark.django_db(transaction=True)]

CALLS, ROOM = 50, 5
BODY = {"model": "alpha-chat", "messages": [{"role": "user", "content": "hello"}], "stream": True}


def stream(secret: str, request_id: str):
    """One streamed call, read to its end (its capture runs there); (status, body text, Retry-After)."""
    response = Client().post(
        "/v1/chat/completions",
        data=json.dumps(BODY),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}", "X-Request-Id": request_id},
    )
    if response.streaming:
        return response.status_code, b"".join(response.streaming_content).decode(), None
    return response.status_code, response.content.decode(), response.get("Retry-After")


def test_fifty_concurrent_streams_on_a_key_with_room_for_five_ceilings_serve_exactly_five(
    upstream, chat_model, tara, tara_key
):
    refused_all = threading.Event()
    refusals = []
    lock = threading.Lock()

    def answer(request):
        # The served calls stay in flight (their ceilings held) until every other call was refused:
        # room is counted by the ceiling at admission, whatever the calls cost in the end.
        refused_all.wait(timeout=60)
        return 200, {"Content-Type": "text/event-stream"}, chat_stream_body()

    upstream.add_callback("POST", f"{OPENAI_BASE}/chat/completions", callback=answer)
    # The ceiling of this body, as a call without a budget reserves it.
    refused_all.set()
    assert stream(tara_key, "req-probe")[0] == 200
    refused_all.clear()
    ceiling = Hold.objects.get(reference="req-probe").amount
    assert ceiling > CHAT_COST
    api_key, secret = api_key_create(
        account=tara,
        group=chat_model.group,
        limits=ApiKeyLimitsInput(budget=str(ceiling * ROOM), budget_period="daily"),
    )
    start = Wallet.objects.get(account=tara).balance

    def call(index: int):
        outcome = stream(secret, f"req-{index}")
        if outcome[0] != 200:
            with lock:
                refusals.append(index)
                if len(refusals) == CALLS - ROOM:
                    refused_all.set()
        return outcome

    outcomes = run_concurrently(call, CALLS)

    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    served = [value for _, value in outcomes if value[0] == 200]
    refused = [value for _, value in outcomes if value[0] != 200]
    assert (len(served), len(refused)) == (ROOM, CALLS - ROOM)
    assert all("[DONE]" in text for _, text, _ in served)
    for status, text, retry_after in refused:
        error = json.loads(text)["error"]
        assert (status, error["code"]) == (429, "USAGE_LIMIT_EXCEEDED")
        assert "this API key's daily budget" in error["message"]
        assert int(retry_after) > 0
    # The window ends at the five actual costs (each call's unused ceiling given back), under budget.
    window = KeyBudgetUsage.objects.get(api_key=api_key)
    assert window.used == CHAT_COST * ROOM
    assert window.used <= api_key.budget
    wallet = Wallet.objects.get(account=tara)
    assert (wallet.balance, wallet.held) == (start - CHAT_COST * ROOM, 0)
    keyed = Hold.objects.filter(api_key=api_key)
    assert (
        sorted(keyed.values_list("status", "amount", "captured_amount"))
        == [("captured", ceiling, CHAT_COST)] * ROOM
    )
    references = set(keyed.values_list("reference", flat=True))
    charges = LedgerEntry.objects.filter(wallet=wallet, kind="charge", reference__in=references)
    assert sorted(charges.values_list("amount", flat=True)) == [-CHAT_COST] * ROOM
    records = UsageRecord.objects.filter(request_id__in=references)
    assert sorted(records.values_list("status", "amount")) == [(200, CHAT_COST)] * ROOM
    assert UsageRecord.objects.filter(status=429, error_code="USAGE_LIMIT_EXCEEDED").count() == CALLS - ROOM
    assert not Hold.objects.filter(status="open").exists()
    assert ledger_check() == []
