"""The offline demo upstream behind the text endpoints (what `make run` serves): every family answers,
streamed and not, and the wallet moves by exactly the cost of the usage the caller was shown."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from billing.models import Wallet
from billing.selectors import ledger_check
from tests.factories import text_model_make

pytestmark = pytest.mark.django_db

PER = Decimal(1_000_000)


@pytest.fixture
def demo_chat(chat_group, demo_upstream):
    return text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def call(client, path, body, key):
    return client.post(
        path, data=json.dumps(body), content_type="application/json", headers={"x-api-key": key}
    )


def cost(input_tokens: int, output_tokens: int) -> Decimal:
    return ((input_tokens * Decimal("2") + output_tokens * Decimal("8")) / PER).quantize(Decimal("1e-8"))


def test_the_demo_answers_chat_completions_and_bills_the_usage_it_reports(client, demo_chat, tara, tara_key):
    response = call(
        client,
        "/v1/chat/completions",
        {"model": "demo-chat", "messages": [{"role": "user", "content": "Hello there"}]},
        tara_key,
    )

    completion = ChatCompletion.model_validate(response.json())
    assert completion.choices[0].message.content
    assert balance(tara) == Decimal("1") - cost(
        completion.usage.prompt_tokens, completion.usage.completion_tokens
    )


def test_the_demo_answers_responses_and_messages(client, demo_chat, tara, tara_key):
    answer = Response.model_validate(
        call(client, "/v1/responses", {"model": "demo-chat", "input": "Hi"}, tara_key).json()
    )
    message = Message.model_validate(
        call(
            client,
            "/v1/messages",
            {"model": "demo-chat", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}]},
            tara_key,
        ).json()
    )
    counted = call(
        client,
        "/v1/messages/count_tokens",
        {"model": "demo-chat", "messages": [{"role": "user", "content": "Hi"}]},
        tara_key,
    ).json()

    assert counted["input_tokens"] == message.usage.input_tokens
    spent = cost(answer.usage.input_tokens, answer.usage.output_tokens) + cost(
        message.usage.input_tokens, message.usage.output_tokens
    )
    assert balance(tara) == Decimal("1") - spent
    assert ledger_check() == []


def test_the_demo_streams_messages_and_bills_them(client, demo_chat, tara, tara_key):
    response = call(
        client,
        "/v1/messages",
        {
            "model": "demo-chat",
            "max_tokens": 50,
            "stream": True,
            "messages": [{"role": "user", "content": "Hi"}],
        },
        tara_key,
    )
    text = b"".join(response.streaming_content).decode()
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]

    start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
    delta = [e for e in events if e["type"] == "message_delta"][-1]["usage"]
    assert events[-1]["type"] == "message_stop"
    assert balance(tara) == Decimal("1") - cost(start["input_tokens"], delta["output_tokens"])
