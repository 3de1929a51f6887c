"""A key's budget under real concurrency, the whole request path: PostgreSQL (and Redis for the
limits when REDIS_URL is set), real threads, one connection each. 50 image calls at once on a key
with room for exactly 5: exactly 5 served and charged, 45 refused, the window never overspent."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.test import Client

from billing.models import Hold, KeyBudgetUsage, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from keys.services import ApiKeyLimitsInput, api_key_create
from tests.billing.conftest import postgres_only, run_concurrently

pytestmark = [pytest.mark.postgres, postgres_only, pytest.mark.django_db(transaction=True)]

CALLS, ROOM = 50, 5
PRICE = Decimal("0.15")  # alpha_model's


def test_fifty_concurrent_image_calls_on_a_key_with_room_for_five_serve_exactly_five(
    alice, alpha_group, alpha_model
):
    api_key, secret = api_key_create(
        account=alice,
        group=alpha_group,
        limits=ApiKeyLimitsInput(budget=str(PRICE * ROOM), budget_period="monthly"),
    )

    def call(index: int):
        response = Client().post(
            "/v1/images/generations",
            data=json.dumps({"model": "alpha-image-2", "prompt": "a lighthouse", "size": "64x64"}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {secret}", "X-Request-Id": f"req-{index}"},
        )
        return response.status_code, response.json(), response.get("Retry-After")

    outcomes = run_concurrently(call, CALLS)

    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    served = [value for _, value in outcomes if value[0] == 200]
    refused = [value for _, value in outcomes if value[0] != 200]
    assert (len(served), len(refused)) == (ROOM, CALLS - ROOM)
    for status, body, retry_after in refused:
        assert (status, body["error"]["type"], body["error"]["code"]) == (
            429,
            "rate_limit_error",
            "USAGE_LIMIT_EXCEEDED",
        )
        assert "this API key's monthly budget of ¥0.75" in body["error"]["message"]
        assert int(retry_after) > 0
    # The key's window: exactly the five calls, at its budget and never over it.
    window = KeyBudgetUsage.objects.get(api_key=api_key)
    assert window.used == PRICE * ROOM == api_key.budget
    # The wallet charged exactly five prices; the ledger, the usage log and the holds agree.
    wallet = Wallet.objects.get(account=alice)
    assert (wallet.balance, wallet.held) == (Decimal("10") - PRICE * ROOM, 0)
    charges = LedgerEntry.objects.filter(wallet=wallet, kind="charge")
    assert sorted(charge.amount for charge in charges) == [-PRICE] * ROOM
    records = UsageRecord.objects.filter(status=200)
    assert sorted(records.values_list("amount", flat=True)) == [PRICE] * ROOM
    assert {charge.reference for charge in charges} == set(records.values_list("request_id", flat=True))
    assert UsageRecord.objects.filter(status=429, error_code="USAGE_LIMIT_EXCEEDED").count() == CALLS - ROOM
    assert Hold.objects.filter(status="captured", api_key=api_key).count() == ROOM
    assert not Hold.objects.exclude(status="captured").exists()  # a refusal leaves no hold behind
    assert ledger_check() == []
