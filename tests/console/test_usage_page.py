"""The usage page (/console/usage/): filters, pagination, CSV export, and refused calls' models."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import timezone

from billing.models import UsageRecord

pytestmark = pytest.mark.django_db

URL = "/console/usage/"


def record(account, *, credential: str, model_id: str = "alpha-image-2", status: int = 200, **fields):
    values = {
        "request_id": f"req_{UsageRecord.objects.count():04d}",
        "endpoint": "/v1/images/generations",
        "billing": "balance",
        "amount": Decimal("0.15") if status == 200 else Decimal(0),
        "latency_ms": 10,
        "created_at": timezone.now(),
        **fields,
    }
    return UsageRecord.objects.create(
        account=account, credential=credential, model_id=model_id, status=status, **values
    )


def csv_rows(response) -> list[list[str]]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response.streaming
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_it_lists_the_accounts_calls_with_tokens_and_amounts(alice_client, alice, bob, alice_key):
    key = f"api_key:{alice_key[0].pk}"
    record(alice, credential=key, request_id="req_image")
    record(
        alice,
        credential=key,
        model_id="chat-small",
        endpoint="/v1/chat/completions",
        request_id="req_text",
        input_tokens=1200,
        cached_tokens=300,
        cache_write_tokens=40,
        output_tokens=56,
        amount=Decimal("0.00002400"),
    )
    record(bob, credential="api_key:999", request_id="req_bob")
    response = alice_client.get(URL)
    assert response.status_code == 200
    page = response.content.decode()
    assert "req_image" in page and "req_text" in page and "req_bob" not in page
    assert "¥0.000024" in page and "¥0.15" in page
    # Every count in the title of the tokens cell (the CSV has them in columns of their own).
    assert (
        'title="1,200 input tokens (uncached), 300 cached input tokens, 40 cache-write tokens, '
        '56 output tokens">1,200 in · 300 cached · 40 cache write · 56 out</span>'
    ) in page
    assert f"{alice_key[0].prefix}… alice laptop" in page


def test_each_filter_offers_each_model_key_and_status_once(alice_client, alice, alice_key):
    key = f"api_key:{alice_key[0].pk}"
    for minutes in range(12):  # many calls of few models, at different times
        model = ("alpha-image-2", "chat-small", "other-model")[minutes % 3]
        when = timezone.now() - timedelta(minutes=minutes)
        record(alice, credential=key, model_id=model, created_at=when)
    record(alice, credential=key, status=404, error_code="model_not_found", model_id="other-model")

    form = alice_client.get(URL).context["form"]

    assert form.fields["model"].choices == [
        ("", "All models"),
        ("alpha-image-2", "alpha-image-2"),
        ("chat-small", "chat-small"),
        ("other-model", "other-model"),
    ]
    assert [value for value, _ in form.fields["key"].choices].count(key) == 1
    assert [value for value, _ in form.status_choices if value.isdigit()] == ["200", "404"]
    page = alice_client.get(URL).content.decode()
    assert page.count('<option value="chat-small"') == 1


def test_it_filters_by_key_model_status_and_days(alice_client, alice, alice_key):
    key = f"api_key:{alice_key[0].pk}"
    zone = ZoneInfo(settings.GATEWAY_TIMEZONE)
    record(alice, credential=key, request_id="req_ok")
    record(alice, credential=f"console:{alice.pk}", request_id="req_console")
    record(alice, credential=key, model_id="other-model", request_id="req_other")
    record(alice, credential=key, status=402, error_code="insufficient_balance", request_id="req_402")
    record(alice, credential=key, status=429, error_code="rate_limited", request_id="req_429")
    record(
        alice,
        credential=key,
        request_id="req_old",
        created_at=datetime(2026, 1, 5, 23, 30, tzinfo=zone),
    )

    def shown(**query) -> set[str]:
        response = alice_client.get(URL, query)
        assert response.status_code == 200
        return {row.record.request_id for row in response.context["rows"]}

    everything = {"req_ok", "req_console", "req_other", "req_402", "req_429", "req_old"}
    assert shown() == everything
    assert shown(key=f"console:{alice.pk}") == {"req_console"}
    assert shown(model="other-model") == {"req_other"}
    assert shown(status="ok") == {"req_ok", "req_console", "req_other", "req_old"}
    assert shown(status="error") == {"req_402", "req_429"}
    assert shown(status="429") == {"req_429"}
    assert shown(first_day="2026-01-05", last_day="2026-01-05") == {"req_old"}
    assert shown(last_day="2026-01-04") == set()
    assert shown(key=key, status="error", model="alpha-image-2") == {"req_402", "req_429"}


@pytest.mark.parametrize(
    "query",
    [{"status": "maybe"}, {"key": "api_key:424242"}, {"first_day": "2026-02-02", "last_day": "2026-02-01"}],
)
def test_it_refuses_bad_filters(alice_client, alice, query):
    response = alice_client.get(URL, query)
    assert response.status_code == 400


def test_it_shows_50_calls_a_page(alice_client, alice):
    start = timezone.now() - timedelta(hours=1)
    for index in range(120):
        record(
            alice,
            credential=f"console:{alice.pk}",
            request_id=f"req_{index:03d}",
            created_at=start + timedelta(seconds=index),
        )
    first = alice_client.get(URL)
    assert [row.record.request_id for row in first.context["rows"]][:2] == ["req_119", "req_118"]
    assert len(first.context["rows"]) == 50
    assert "Page 1 of 3" in first.content.decode()
    third = alice_client.get(URL, {"page": 3, "status": "ok"})
    assert [row.record.request_id for row in third.context["rows"]] == [
        f"req_{i:03d}" for i in range(19, -1, -1)
    ]
    assert 'href="?status=ok&amp;page=2"' in third.content.decode()


def test_it_exports_the_filtered_calls_as_csv(alice_client, alice, bob, alice_key):
    key = f"api_key:{alice_key[0].pk}"
    record(alice, credential=key, request_id="req_image", amount=Decimal("0.15"))
    record(
        alice,
        credential=key,
        model_id="chat-small",
        endpoint="/v1/chat/completions",
        request_id="req_text",
        input_tokens=1200,
        cached_tokens=0,
        cache_write_tokens=0,
        output_tokens=56,
        amount=Decimal("0.00002400"),
    )
    record(
        alice, credential=key, status=404, error_code="model_not_found", model_id="nope", request_id="req_404"
    )
    record(bob, credential="api_key:999", request_id="req_bob")

    rows = csv_rows(alice_client.get(URL, {"format": "csv"}))
    header, body = rows[0], rows[1:]
    assert header == [
        "time", "request_id", "key", "model", "endpoint", "status", "error_code",
        "input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens", "amount", "billing",
    ]  # fmt: skip
    by_id = {row[1]: dict(zip(header, row, strict=True)) for row in body}
    assert set(by_id) == {"req_image", "req_text", "req_404"}  # never bob's
    assert by_id["req_text"]["amount"] == "0.00002400"
    assert by_id["req_text"]["input_tokens"] == "1200" and by_id["req_text"]["output_tokens"] == "56"
    assert by_id["req_image"]["amount"] == "0.15000000" and by_id["req_image"]["input_tokens"] == ""
    assert by_id["req_404"]["model"] == "nope" and by_id["req_404"]["status"] == "404"
    assert by_id["req_image"]["key"] == f"{alice_key[0].prefix}… alice laptop"

    filtered = csv_rows(alice_client.get(URL, {"format": "csv", "status": "error"}))
    assert [row[1] for row in filtered[1:]] == ["req_404"]


def test_the_usage_page_needs_a_signed_in_user(client):
    response = client.get(URL)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_a_refused_call_shows_the_model_it_asked_for(alice_client, alice, alice_key, alpha_model):
    _, secret = alice_key
    response = alice_client.post(
        "/v1/images/generations",
        data={"model": "no-such-model", "prompt": "a red bicycle"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert response.status_code >= 400
    refused = UsageRecord.objects.get(account=alice)
    assert refused.model_id == "no-such-model"
    overview = alice_client.get("/console/").content.decode()
    assert "no-such-model" in overview
    usage = alice_client.get(URL).content.decode()
    assert "no-such-model" in usage


def test_the_csv_never_hands_a_spreadsheet_a_formula(alice_client, alice, alice_key):
    key = f"api_key:{alice_key[0].pk}"
    record(alice, credential=key, status=404, model_id='=HYPERLINK("http://x")', request_id="req_formula")

    rows = csv_rows(alice_client.get(URL, {"format": "csv"}))

    by_id = {row[1]: row for row in rows[1:]}
    assert by_id["req_formula"][3] == '\'=HYPERLINK("http://x")'
