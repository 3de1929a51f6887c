"""A caller who leaves a stream before its final event: the gateway closes the upstream's connection at
once (the provider stops generating) and charges the input plus the output received until then,
counted with tiktoken's o200k_base for OpenAI models and bounded by its UTF-8 bytes for the others,
never more than the hold (docs/text.md, "A caller who leaves mid-stream"). A stream the upstream cuts
still costs nothing.

Over real HTTP, per family: the gateway in a live server (this process, a thread per request), the
fake upstream process (tests/fake_upstream.py) dripping its events, and a caller that reads a few of
them and closes its connection. The fake upstream says how many events it sent and when it saw its
connection close. PostgreSQL and SQLite.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal
from typing import Any

import pytest
import requests
import tiktoken
from django.core.cache import cache

from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from chat.tokenizers import ENCODINGS_DIR
from chat.validation import input_ceiling_tokens
from groups.services import group_upsert
from keys.services import api_key_create
from tests.factories import text_model_make, upstream_make
from tests.fake_text_upstream import CHAT, MESSAGES, RESPONSES, TextAnswer, input_tokens_for

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread sees committed rows

KEY_ENV = "IGW_TEST_LEAVING_PROVIDER_KEY"
DRIP = 0.25  # seconds between the upstream's events
# 32 words: "Fake reply to: " and the prompt's 29, one delta each: 8 s of events at DRIP.
PROMPT = "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d"
MILLION = Decimal(1_000_000)
TOP_UP = Decimal("10.00")


@dataclass(frozen=True)
class Case:
    path: str  # the fake upstream's path, and the gateway's
    model: str
    body: dict[str, Any]


CASES = {
    "chat": Case(CHAT, "leave-gpt", {"messages": [{"role": "user", "content": PROMPT}]}),
    "responses": Case(RESPONSES, "leave-gpt", {"input": PROMPT}),
    "messages": Case(
        MESSAGES, "leave-claude", {"max_tokens": 256, "messages": [{"role": "user", "content": PROMPT}]}
    ),
}


@dataclass
class World:
    key: str
    account: Any
    models: dict[str, Any]


@pytest.fixture
def world(fake_upstream, monkeypatch) -> World:
    cache.clear()  # rate windows and circuits are keyed by ids that other tests reuse
    monkeypatch.setenv(KEY_ENV, "sk-provider-secret")
    group, _ = group_upsert(
        group_id=11,
        name="Leaving",
        status="active",
        image_enabled=False,
        billing="balance",
        allow_group_override=False,
        rpm=0,
        concurrency=0,
    )
    openai = upstream_make(name="leave-openai", base_url=fake_upstream.base_url, api_key_env=KEY_ENV)
    anthropic = upstream_make(
        name="leave-anthropic", base_url=fake_upstream.base_url, api_key_env=KEY_ENV, kind="anthropic"
    )
    models = {
        "leave-gpt": text_model_make(
            model_id="leave-gpt",
            group=group,
            upstreams=[openai],
            upstream_model="gpt-4o-mini",  # an OpenAI model: tiktoken's o200k_base counts its output
            input_price="2.345",
            output_price="9.875",
            max_output_tokens=4096,
        ),
        "leave-claude": text_model_make(
            model_id="leave-claude",
            group=group,
            upstreams=[anthropic],
            upstream_model="claude-sonnet-4-5",  # no public tokenizer: its output's bytes bound it
            input_price="3",
            output_price="15",
            max_output_tokens=4096,
        ),
        # Output far dearer than input, for a bytes bound above the hold.
        "leave-dear": text_model_make(
            model_id="leave-dear",
            group=group,
            upstreams=[anthropic],
            upstream_model="claude-sonnet-4-5",
            input_price="0.01",
            output_price="100",
            max_output_tokens=4096,
        ),
    }
    account = account_create(username="leaver", email="leaver@example.com")
    account_set_groups(account=account, allowed_groups=[group], current_group=group)
    wallet_top_up(account=account, amount=str(TOP_UP), reference="fixture")
    _, key = api_key_create(account=account, group=group, label="leaving")
    yield World(key=key, account=account, models=models)
    cache.clear()


def stream_open(url: str, key: str, path: str, body: dict[str, Any]) -> requests.Response:
    """A streamed call of the gateway at `url`, its answer's head read."""
    response = requests.post(
        f"{url}{path}",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {key}"},
        stream=True,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response


def _open(
    live_server, world: World, case: Case, *, model: str | None = None, **extra: Any
) -> requests.Response:
    return stream_open(
        live_server.url, world.key, case.path, {"model": model or case.model, **case.body, **extra}
    )


def read_deltas_then_leave(response: requests.Response, deltas: int) -> float:
    """Read the answer until `deltas` text deltas have come, then close the connection; when it did."""
    seen = 0
    for line in response.iter_lines():
        if line.startswith(b"data: ") and delta_text(json.loads(line[6:]) if line[6:] != b"[DONE]" else None):
            seen += 1
            if seen == deltas:
                break
    response.close()
    return time.monotonic()


def delta_text(payload: Any) -> str:
    """The text an event's data carries, read as each family's SDK reads it."""
    if not isinstance(payload, dict):
        return ""
    if payload.get("object") == "chat.completion.chunk":
        choices = payload.get("choices") or []
        return "".join((choice.get("delta") or {}).get("content") or "" for choice in choices)
    if payload.get("type") == "response.output_text.delta":
        return payload["delta"]
    if payload.get("type") == "content_block_delta":
        return payload["delta"].get("text", "")
    return ""


def stream_record(fake_upstream, path: str) -> dict[str, Any]:
    """The fake upstream's record of the stream, once it has ended."""
    deadline = time.monotonic() + 10
    while True:
        records = [record for record in fake_upstream.requests() if record["path"] == path]
        assert len(records) == 1
        if "stream" in records[0] or time.monotonic() > deadline:
            return records[0]
        time.sleep(0.05)


def received_text(record: dict[str, Any]) -> str:
    """The text of the events the fake upstream sent: what the gateway received."""
    answer = TextAnswer(record["path"], record["json"], record["headers"], {}, 1)
    sent = answer.events()[: record["stream"]["sent"]]
    text = ""
    for event in sent:
        data = event.decode().split("data: ", 1)[1].strip()
        if data != "[DONE]":
            text += delta_text(json.loads(data))
    return text


def _cost(tokens_input: int, tokens_output: int, model) -> Decimal:
    exact = (tokens_input * model.input_price + tokens_output * model.output_price) / MILLION
    return exact.quantize(Decimal("0.00000001"), rounding=ROUND_UP)


def _o200k_count(text: str) -> int:
    import os

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ENCODINGS_DIR))  # the encoding shipped with the gateway
    return len(tiktoken.get_encoding("o200k_base").encode_ordinary(text))


def usage_record_ended(status: int) -> UsageRecord:
    """The call's usage record once the gateway has ended the call, which it does after the caller's
    answer: a charged call's record is written with its capture (status 200), then given its end."""
    deadline = time.monotonic() + 10
    while not UsageRecord.objects.filter(status=status).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return UsageRecord.objects.get()


def _assert_charged_once(world: World, amount: Decimal, *, status: int, code: str) -> UsageRecord:
    record = usage_record_ended(status)
    assert (record.status, record.error_code, record.amount) == (status, code, amount)
    hold = Hold.objects.get()
    if amount:
        assert (hold.status, hold.captured_amount) == (Hold.Status.CAPTURED, amount)
        assert amount <= hold.amount
    else:
        assert hold.status == Hold.Status.RELEASED
    charges = LedgerEntry.objects.filter(wallet__account=world.account, kind=LedgerEntry.Kind.CHARGE)
    assert [entry.amount for entry in charges] == ([-amount] if amount else [])
    assert Wallet.objects.get(account=world.account).balance == TOP_UP - amount
    assert ledger_check() == []
    return record


@pytest.mark.parametrize("family", CASES)
def test_a_caller_who_leaves_closes_the_upstream_and_pays_the_input_and_the_output_received(
    live_server, fake_upstream, world, family
):
    case = CASES[family]
    fake_upstream.script(case.path, {"event_delay": DRIP})

    left_at = read_deltas_then_leave(_open(live_server, world, case), deltas=4)

    # The upstream's connection closed within a moment (the gateway's next write to the caller
    # finds it gone), long before the stream's 8 s.
    upstream = stream_record(fake_upstream, case.path)
    stream = upstream["stream"]
    assert stream["ended"] == "disconnected"
    assert stream["at"] - left_at < 3 * DRIP
    assert 4 <= stream["sent"] < stream["events"] - 20
    received = received_text(upstream)
    assert received.startswith("Fake reply to: a ")
    model = world.models[case.model]
    if family == "messages":  # the input Anthropic reported at the start; the output's UTF-8 bytes
        tokens_input = input_tokens_for(upstream["json"])
        tokens_output = len(received.encode())
    else:  # the hold's input ceiling (unreported); the output as o200k_base counts it
        tokens_input = input_ceiling_tokens(body={"model": case.model, **case.body, "stream": True})
        tokens_output = _o200k_count(received)
    expected = _cost(tokens_input, tokens_output, model)

    record = _assert_charged_once(world, expected, status=499, code="client_closed_request")
    assert (record.input_tokens, record.output_tokens) == (tokens_input, tokens_output)
    assert expected > _cost(tokens_input, 0, model)  # the output received is charged


def test_a_caller_who_leaves_never_pays_more_than_the_hold(live_server, fake_upstream, world):
    # Input at ¥0.01, output at ¥100 per million, 5 tokens of output allowed: the bytes bound of the
    # output received (at least "Fake reply ", 11 bytes) costs more than the hold reserved for 5 tokens.
    case = CASES["messages"]
    fake_upstream.script(case.path, {"event_delay": DRIP})

    read_deltas_then_leave(_open(live_server, world, case, model="leave-dear", max_tokens=5), deltas=2)

    assert stream_record(fake_upstream, case.path)["stream"]["ended"] == "disconnected"
    hold = Hold.objects.get()
    assert hold.amount < _cost(0, 11, world.models["leave-dear"])
    record = _assert_charged_once(world, hold.amount, status=499, code="client_closed_request")
    assert record.output_tokens >= 11


@pytest.mark.parametrize("family", CASES)
def test_a_stream_the_upstream_cuts_still_costs_nothing(live_server, fake_upstream, world, family):
    case = CASES[family]
    fake_upstream.script(case.path, {"event_delay": DRIP / 5, "action": "cut_stream", "after": 8})

    response = _open(live_server, world, case)
    lines = list(response.iter_lines())

    assert stream_record(fake_upstream, case.path)["stream"] == {
        **stream_record(fake_upstream, case.path)["stream"],
        "ended": "cut",
        "sent": 8,
    }
    assert any(b"upstream_stream_cut" in line for line in lines)  # the family's error event
    _assert_charged_once(world, Decimal(0), status=502, code="upstream_stream_cut")
