"""The offline demo upstream behind the text endpoints (what `make run` serves): every family answers,
streamed and not, and the wallet moves by exactly the cost of the usage the caller was shown."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path

import pytest
from anthropic.types import Message
from django.core.management import call_command
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from accounts.models import Account
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from groups.models import Group
from keys.services import api_key_create
from tests.factories import text_model_make

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]

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


@pytest.mark.django_db(transaction=True)  # closing the response ends the request, and its connection
def test_a_caller_who_leaves_a_demo_stream_pays_its_input_and_the_bytes_of_the_text_it_got(
    client, demo_chat, tara, tara_key
):
    # The demo makes its events itself (no bytes from a connection): what it generated still counts,
    # bounded by its UTF-8 bytes (the demo has no public tokenizer).
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
    received = []
    for piece in response.streaming_content:
        received.append(piece)
        if sum(b"text_delta" in p for p in received) == 2:
            break
    response.close()

    events = [
        json.loads(line[6:]) for line in b"".join(received).decode().splitlines() if line.startswith("data: ")
    ]
    start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code) == (499, "client_closed_request")
    assert (record.input_tokens, record.output_tokens) == (start["input_tokens"], len(text.encode()))
    assert (
        balance(tara) == Decimal("1") - cost(start["input_tokens"], len(text.encode())) == 1 - record.amount
    )
    assert ledger_check() == []


# --- agent clients' loops through the gateway ------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def charges(account) -> list[Decimal]:
    return list(
        LedgerEntry.objects.filter(wallet__account=account, kind=LedgerEntry.Kind.CHARGE)
        .order_by("pk")
        .values_list("amount", flat=True)
    )


def test_a_tool_loop_is_a_call_then_a_tool_result_then_text_each_billed_once(
    client, demo_chat, tara, tara_key
):
    asked = [{"role": "user", "content": "Use get_weather for Paris"}]
    body = {"model": "demo-chat", "messages": asked, "tools": [WEATHER_TOOL]}
    first = call(client, "/v1/chat/completions", body, tara_key)
    tool_call = first.json()["choices"][0]["message"]["tool_calls"][0]
    history = [
        *asked,
        {"role": "assistant", "content": None, "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": tool_call["id"], "content": "Sunny"},
    ]
    second = call(client, "/v1/chat/completions", {**body, "messages": history}, tara_key)

    assert json.loads(tool_call["function"]["arguments"]).keys() == {"city"}
    assert second.json()["choices"][0]["message"]["content"].startswith(
        'Demo reply after the tool result: "Sunny"'
    )
    usages = [first.json()["usage"], second.json()["usage"]]
    assert charges(tara) == [-cost(u["prompt_tokens"], u["completion_tokens"]) for u in usages]
    records = UsageRecord.objects.filter(account=tara).order_by("pk")
    assert [(r.status, r.output_tokens) for r in records] == [(200, u["completion_tokens"]) for u in usages]
    assert ledger_check() == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "demo-chat"}),
        ("/v1/responses", {"model": "demo-chat", "instructions": "Be brief."}),
        ("/v1/messages", {"model": "demo-chat", "messages": [{"role": "user", "content": "Hi"}]}),
    ],
    ids=["chat-without-messages", "responses-without-input", "messages-without-max-tokens"],
)
def test_what_the_real_apis_refuse_is_refused_in_their_shape_and_costs_nothing(
    client, demo_chat, tara, tara_key, path, body
):
    response = call(client, path, body, tara_key)

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert charges(tara) == []
    assert balance(tara) == Decimal("1")
    assert UsageRecord.objects.get(account=tara).status == 400
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()


@pytest.mark.parametrize(
    "kind", [{"a": 1}, ["function_call_output"], None, 7], ids=["object", "array", "null", "number"]
)
def test_a_responses_input_item_whose_type_is_not_a_string_is_answered_not_a_server_error(
    client, demo_chat, tara, tara_key, kind
):
    """The demo reads the last input item's `type` to tell a tool's result; any JSON value there
    (the fuzz found an object) is answered as the demo answers what it does not check."""
    response = call(client, "/v1/responses", {"model": "demo-chat", "input": [{"type": kind}]}, tara_key)

    assert response.status_code == 200, response.content
    answer = Response.model_validate(response.json())
    assert answer.output_text
    usage = answer.usage
    assert usage is not None
    assert charges(tara) == [-cost(usage.input_tokens, usage.output_tokens)]
    assert balance(tara) == Decimal("1") - cost(usage.input_tokens, usage.output_tokens)
    assert UsageRecord.objects.get(account=tara).status == 200
    assert ledger_check() == []


@pytest.fixture
def demo_config(db):
    call_command("loadconfig", str(ROOT / "config" / "demo.toml"), stdout=io.StringIO())
    demo = Account.objects.get(user__username="demo")
    _, secret = api_key_create(account=demo, group=Group.objects.get(name="Demo-Chat"), label="client")
    return secret


@pytest.mark.parametrize(
    ("model", "asked", "status"),
    [
        ("demo-claude", 32000, 200),
        ("demo-claude", 64000, 200),
        ("demo-claude", 128000, 400),
        ("demo-chat", 32768, 200),
    ],
)
def test_the_demo_models_allow_the_output_limits_of_real_models(client, demo_config, model, asked, status):
    """Claude Code asks for 32000 output tokens, litellm for 128000: as against the real provider."""
    body = {"model": model, "max_tokens": asked, "messages": [{"role": "user", "content": "Hi"}]}

    response = call(client, "/v1/messages", body, demo_config)

    assert response.status_code == status
    if status == 400:
        limit = f"`max_tokens` is {asked}, above the 64000 output tokens model 'demo-claude' allows."
        assert limit in response.json()["error"]["message"]
