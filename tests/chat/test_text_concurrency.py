"""Many text calls at once on a balance that covers a few ceilings: PostgreSQL, real threads, the
whole request path. The balance never goes below zero, and ends at exactly the start minus the
exact costs of the calls that succeeded."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
from django.test import Client

from billing.ledger import wallet_adjust
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.money import money_round_up
from billing.selectors import ledger_check
from tests.billing.conftest import postgres_only, run_concurrently
from tests.chat.conftest import OPENAI_BASE

pytestmark = [pytest.mark.postgres, postgres_only, pytest.mark.django_db(transaction=True)]

CALLS = 24


def usage_for(prompt_chars: int) -> dict:
    return {"prompt_tokens": 50 + prompt_chars, "completion_tokens": 7 + prompt_chars % 5}


def test_concurrent_text_calls_never_overdraw_and_charge_exactly_the_successes(
    upstream, chat_model, tara, tara_key
):
    # The ceiling of each call (1000 output tokens at ¥8/M, its bytes and overhead at ¥2/M) is about
    # ¥0.0103: ¥0.04 covers three or four at once, while the calls cost about ¥0.0002 each.
    wallet_adjust(account=tara, amount=Decimal("-0.96"), note="leave ¥0.04")
    start = Wallet.objects.get(account=tara).balance

    def answer(request):
        time.sleep(0.05)  # calls overlap: holds compete for the balance
        sent = json.loads(request.body)
        usage = usage_for(len(sent["messages"][0]["content"]))
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": sent["model"],
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ],
            "usage": {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]},
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(body)

    upstream.add_callback("POST", f"{OPENAI_BASE}/chat/completions", callback=answer)

    def call(index: int):
        content = "x" * (index + 1)
        response = Client().post(
            "/v1/chat/completions",
            data=json.dumps({"model": "alpha-chat", "messages": [{"role": "user", "content": content}]}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {tara_key}", "X-Request-Id": f"req-{index}"},
        )
        return response.status_code, len(content)

    outcomes = run_concurrently(call, CALLS)

    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    statuses = [value[0] for _, value in outcomes]
    assert set(statuses) <= {200, 403}
    assert 200 in statuses and 403 in statuses  # some were refused for the ceiling, never overdrawn
    expected = Decimal("0")
    for status, chars in (value for _, value in outcomes):
        if status == 200:
            usage = usage_for(chars)
            expected += money_round_up(
                (usage["prompt_tokens"] * Decimal("2") + usage["completion_tokens"] * Decimal("8"))
                / 1_000_000
            )
    wallet = Wallet.objects.get(account=tara)
    assert wallet.balance == start - expected
    assert wallet.balance >= 0 and wallet.held == 0
    assert LedgerEntry.objects.filter(kind="charge").count() == statuses.count(200)
    assert not Hold.objects.filter(status="open").exists()
    assert UsageRecord.objects.filter(status=200).count() == statuses.count(200)
    assert UsageRecord.objects.filter(
        status=403, error_code="INSUFFICIENT_BALANCE"
    ).count() == statuses.count(403)
    assert ledger_check() == []
