"""Text models on a `gemini` upstream: every text endpoint through the translators (chat completions
directly, messages and responses through Chat Completions as the hub), with Google's API behind
`responses`: the body sent is generateContent's, the key goes as `x-goog-api-key`, the answers and
streams come back in the caller's family, and the wallet moves by exactly the cost of the usage
Gemini reported (`usageMetadata`, thoughts billed as output)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.models import Hold, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.chat.conftest import KEY_ENV, PROVIDER_KEY, sse_body
from tests.factories import text_model_make, upstream_make

pytestmark = pytest.mark.django_db

GEMINI_BASE = "https://generativelanguage.test/v1beta"
GENERATE = f"{GEMINI_BASE}/models/gemini-2.5-flash:generateContent"
STREAM = f"{GEMINI_BASE}/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
USAGE = {
    "promptTokenCount": 120,
    "cachedContentTokenCount": 20,
    "candidatesTokenCount": 30,
    "thoughtsTokenCount": 4,
}
# 100 input at 2.00, 20 cached at 0.50, 34 output (thoughts included) at 8.00, per million tokens.
COST = (100 * Decimal("2.00") + 20 * Decimal("0.50") + 34 * Decimal("8.00")) / Decimal(1_000_000)


@pytest.fixture
def gemini_model(chat_group, monkeypatch):
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    gemini = upstream_make(name="gemini", base_url=GEMINI_BASE, api_key_env=KEY_ENV, kind="gemini")
    return text_model_make(
        model_id="alpha-gemini",
        group=chat_group,
        upstreams=[gemini],
        upstream_model="gemini-2.5-flash",
        cached_input_price="0.50",
        max_output_tokens=1000,
    )


def post(client, path, body, key):
    return client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


ANSWER = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "Hello from Gemini"}]}, "finishReason": "STOP"}
    ],
    "usageMetadata": USAGE,
}


@pytest.mark.parametrize(
    ("path", "body", "text_of"),
    [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "system", "content": "Terse."}, {"role": "user", "content": "Hi"}]},
            lambda b: b["choices"][0]["message"]["content"],
        ),
        (
            "/v1/messages",
            {"max_tokens": 100, "system": "Terse.", "messages": [{"role": "user", "content": "Hi"}]},
            lambda b: b["content"][0]["text"],
        ),
        (
            "/v1/responses",
            {"instructions": "Terse.", "input": "Hi"},
            lambda b: b["output"][0]["content"][0]["text"],
        ),
    ],
    ids=["chat", "messages", "responses"],
)
def test_every_text_endpoint_reaches_gemini_and_is_charged_exactly(
    client, upstream, gemini_model, tara, tara_key, path, body, text_of
):
    upstream.post(GENERATE, json=ANSWER)
    before = balance(tara)

    response = post(client, path, {"model": "alpha-gemini", **body}, tara_key)

    assert response.status_code == 200, response.content
    assert text_of(response.json()) == "Hello from Gemini"
    sent = json.loads(upstream.calls[0].request.body)
    assert sent["systemInstruction"] == {"parts": [{"text": "Terse."}]}
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "Hi"}]}]
    assert upstream.calls[0].request.headers["x-goog-api-key"] == PROVIDER_KEY
    assert balance(tara) == before - COST
    record = UsageRecord.objects.get()
    assert (record.amount, record.input_tokens, record.cached_tokens, record.output_tokens) == (
        COST,
        100,
        20,
        34,
    )
    assert ledger_check() == []


def test_a_stream_from_gemini_is_translated_as_it_comes_and_charged_exactly(
    client, upstream, gemini_model, tara, tara_key
):
    upstream.post(
        STREAM,
        body=sse_body(
            (
                "",
                {
                    "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}],
                    "usageMetadata": {"promptTokenCount": 120},
                },
            ),
            (
                "",
                {
                    "candidates": [
                        {"content": {"role": "model", "parts": [{"text": "lo"}]}, "finishReason": "STOP"}
                    ],
                    "usageMetadata": USAGE,
                },
            ),
        ),
        content_type="text/event-stream",
    )
    before = balance(tara)

    response = post(
        client,
        "/v1/messages",
        {
            "model": "alpha-gemini",
            "max_tokens": 100,
            "stream": True,
            "messages": [{"role": "user", "content": "Hi"}],
        },
        tara_key,
    )

    assert response.status_code == 200
    text = b"".join(response.streaming_content).decode()
    names = [block.split("\n", 1)[0].removeprefix("event: ") for block in text.strip().split("\n\n")]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert '"text":"Hel"' in text and '"text":"lo"' in text
    assert balance(tara) == before - COST
    assert UsageRecord.objects.get().amount == COST
    assert not Hold.objects.filter(status="open").exists()


def test_a_gemini_refusal_keeps_its_status_and_message(client, upstream, gemini_model, tara, tara_key):
    upstream.post(
        GENERATE,
        status=400,
        json={
            "error": {
                "code": 400,
                "message": "Request contains an invalid argument.",
                "status": "INVALID_ARGUMENT",
            }
        },
    )
    before = balance(tara)

    response = post(
        client,
        "/v1/chat/completions",
        {"model": "alpha-gemini", "messages": [{"role": "user", "content": "Hi"}]},
        tara_key,
    )

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Request contains an invalid argument."
    assert balance(tara) == before


def test_count_tokens_for_a_gemini_model_asks_geminis_count_tokens_free(
    client, upstream, gemini_model, tara, tara_key
):
    upstream.post(f"{GEMINI_BASE}/models/gemini-2.5-flash:countTokens", json={"totalTokens": 31})
    before = balance(tara)
    body = {
        "model": "alpha-gemini",
        "system": "Terse.",
        "messages": [{"role": "user", "content": "Hello there"}],
    }

    response = post(client, "/v1/messages/count_tokens", body, tara_key)

    assert response.status_code == 200, response.content
    assert response.json() == {"input_tokens": 31}
    sent = json.loads(upstream.calls[0].request.body)
    assert sent == {
        "generateContentRequest": {
            "model": "models/gemini-2.5-flash",
            "contents": [{"role": "user", "parts": [{"text": "Hello there"}]}],
            "systemInstruction": {"parts": [{"text": "Terse."}]},
        }
    }
    assert balance(tara) == before
    record = UsageRecord.objects.get()
    assert (record.endpoint, record.status, record.amount) == ("messages.count_tokens", 200, 0)
