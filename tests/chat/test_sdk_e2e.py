"""The text endpoints end to end, the way callers use them: the official `openai` and `anthropic` SDKs
against the gateway under gunicorn, in front of the fake upstream process (tests/fake_upstream.py).

Every billed call checks that the content arrived and that the wallet dropped by exactly the cost
computed here from the usage the caller received; every failure that nothing was charged and that a
usage record says why. One gateway and one fake upstream serve the whole module.

PostgreSQL only: the server is another process on the test database. The module's rows are made once,
committed (a per-test transaction would hide them from the server), and flushed when the module ends.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal
from typing import Any

import anthropic
import openai
import pytest
import requests
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from accounts.models import Account
from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import Hold, UsageRecord, Wallet
from chat.models import TextModel
from chat.validation import input_ceiling_tokens
from groups.services import group_upsert
from keys.services import api_key_create
from tests.chat.test_stream_caller_leaves import (
    read_deltas_then_leave,
    received_text,
    stream_open,
    stream_record,
)
from tests.factories import upstream_make
from tests.fake_text_upstream import CHAT, COUNT_TOKENS, MESSAGES, RESPONSES, TextAnswer, input_tokens_for
from tests.gunicorn_server import gunicorn_serving

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    # Each test reads in its own transaction, which sees every commit of the server (read committed).
    pytest.mark.django_db,
]

OPENAI_KEY_ENV = "IGW_TEST_TEXT_OPENAI_KEY"
OPENAI_KEY = "sk-openai-provider-secret"
ANTHROPIC_KEY_ENV = "IGW_TEST_TEXT_ANTHROPIC_KEY"
ANTHROPIC_KEY = "sk-ant-provider-secret"
METRICS_TOKEN = "metrics-token-for-the-text-e2e"
MILLION = Decimal(1_000_000)
CENT_OF_A_MICRO = Decimal("0.00000001")  # money's 8th decimal place
PROMPT = "Tell me something about the sea"
REPLY = f"Fake reply to: {PROMPT}"

# The module's text models: (model_id, family, upstream_model, input, output, cached input, cache write)
MODELS = {
    "alpha-chat": ("openai", "up-gpt", "2.345", "9.875", "0.5", None),
    "alpha-mini": ("openai", "", "0.15", "0.6", None, None),
    "alpha-claude": ("anthropic", "up-claude", "3", "15", "0.3", "3.75"),
    "alpha-haiku": ("anthropic", "", "0.8", "4", None, None),
    # On an upstream that may keep silent for 1 s at most (the "openai-brief" upstream).
    "alpha-brief": ("openai-brief", "", "1", "2", None, None),
}


@dataclass
class World:
    url: str
    key: str  # carol's: a well-funded wallet
    poor_key: str  # dave's: too little for any hold
    carol: Account
    dave: Account
    models: dict[str, Any]


def _world_build(fake) -> World:
    group, _ = group_upsert(
        group_id=7,
        name="Alpha-Chat",
        status="active",
        image_enabled=False,
        billing="balance",
        allow_group_override=False,
        rpm=0,
        concurrency=0,
    )
    upstreams = {
        "openai": upstream_make(
            name="text-openai", kind="openai", base_url=fake.base_url, api_key_env=OPENAI_KEY_ENV
        ),
        "anthropic": upstream_make(
            name="text-anthropic", kind="anthropic", base_url=fake.base_url, api_key_env=ANTHROPIC_KEY_ENV
        ),
        "openai-brief": upstream_make(
            name="text-openai-brief",
            base_url=fake.base_url,
            api_key_env=OPENAI_KEY_ENV,
            timeout_seconds=1,
        ),
    }
    models = {}
    for model_id, (family, upstream_model, inp, out, cached, write) in MODELS.items():
        model = TextModel.objects.create(
            model_id=model_id,
            group=group,
            upstream_model=upstream_model,
            input_price=Decimal(inp),
            output_price=Decimal(out),
            cached_input_price=None if cached is None else Decimal(cached),
            cache_write_price=None if write is None else Decimal(write),
            max_output_tokens=4096,
            enabled=True,
        )
        model.upstreams.set([upstreams[family]])
        model.refresh_from_db()  # the prices as stored
        models[model_id] = model
    accounts = {}
    for name, amount in (("carol", "10.00"), ("dave", "0.0001")):
        account = account_create(username=name, email=f"{name}@example.com")
        account_set_groups(account=account, allowed_groups=[group], current_group=group)
        wallet_top_up(account=account, amount=amount, reference="e2e fixture")
        accounts[name] = account
    return World(
        url="",
        key=api_key_create(account=accounts["carol"], group=group, label="e2e")[1],
        poor_key=api_key_create(account=accounts["dave"], group=group, label="e2e-poor")[1],
        carol=accounts["carol"],
        dave=accounts["dave"],
        models=models,
    )


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, fake_upstream_process, tmp_path_factory) -> Iterator[World]:
    env = {
        OPENAI_KEY_ENV: OPENAI_KEY,
        ANTHROPIC_KEY_ENV: ANTHROPIC_KEY,
        # One retry, soon, and no circuit opening across the module's deliberate failures.
        "GATEWAY_RETRY_MAX": "1",
        "GATEWAY_RETRY_BASE_SECONDS": "0.01",
        "GATEWAY_RETRY_MAX_WAIT_SECONDS": "0.1",
        "GATEWAY_CIRCUIT_THRESHOLD": "1000",
        "GATEWAY_METRICS_TOKEN": METRICS_TOKEN,
    }
    with django_db_blocker.unblock():
        cache.clear()  # circuit states and rate-limit counters of earlier tests' upstreams and keys
        try:
            world = _world_build(fake_upstream_process)
            log = tmp_path_factory.mktemp("text-e2e") / "gunicorn.log"
            with gunicorn_serving(log_path=log, env=env) as url:
                world.url = url
                yield world
        finally:
            # What a transactional test's teardown does: the next tests start from empty tables.
            call_command("flush", verbosity=0, interactive=False, reset_sequences=False)
            cache.clear()


@pytest.fixture(autouse=True)
def fake(world, fake_upstream_process):
    """The fake upstream, clean for each test."""
    fake_upstream_process.reset()
    yield fake_upstream_process
    fake_upstream_process.reset()


@pytest.fixture
def oa(world) -> Iterator[openai.OpenAI]:
    # Closed after each test: a kept-alive connection would hold up the server's graceful stop.
    with openai.OpenAI(base_url=f"{world.url}/v1", api_key=world.key, max_retries=0) as client:
        yield client


@pytest.fixture
def an(world) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=world.url, api_key=world.key, max_retries=0) as client:
        yield client


# Money


def _round_up(per_million: Decimal) -> Decimal:
    return (per_million / MILLION).quantize(CENT_OF_A_MICRO, rounding=ROUND_UP)


def openai_cost(model, *, prompt: int, cached: int, completion: int) -> Decimal:
    cached_price = model.cached_input_price if model.cached_input_price is not None else model.input_price
    return _round_up(
        (prompt - cached) * model.input_price + cached * cached_price + completion * model.output_price
    )


def anthropic_cost(model, *, input: int, cache_read: int, cache_creation: int, output: int) -> Decimal:
    read_price = model.cached_input_price if model.cached_input_price is not None else model.input_price
    write_price = model.cache_write_price if model.cache_write_price is not None else model.input_price
    return _round_up(
        input * model.input_price
        + cache_read * read_price
        + cache_creation * write_price
        + output * model.output_price
    )


def chat_cost(model, usage) -> Decimal:
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return openai_cost(
        model, prompt=usage.prompt_tokens, cached=cached or 0, completion=usage.completion_tokens
    )


def responses_cost(model, usage) -> Decimal:
    cached = usage.input_tokens_details.cached_tokens
    return openai_cost(model, prompt=usage.input_tokens, cached=cached, completion=usage.output_tokens)


def messages_cost(model, usage) -> Decimal:
    return anthropic_cost(
        model,
        input=usage.input_tokens,
        cache_read=usage.cache_read_input_tokens or 0,
        cache_creation=usage.cache_creation_input_tokens or 0,
        output=usage.output_tokens,
    )


@dataclass
class Metered:
    """What one call did to an account: filled in when the `metered` block ends."""

    balance_before: Decimal
    records_before: int
    charged: Decimal | None = None
    record: UsageRecord | None = None


def _wallet(account: Account) -> Wallet:
    return Wallet.objects.get(account=account)


@contextmanager
def metered(account: Account, *, recorded: bool = True) -> Iterator[Metered]:
    """Measure the call made in the block. A stream's capture may commit just after the caller read its
    last event, so this waits (briefly) for the call's usage record, which is written with it."""
    call = Metered(_wallet(account).balance, UsageRecord.objects.filter(account=account).count())
    yield call
    if recorded:
        deadline = time.monotonic() + 5
        while UsageRecord.objects.filter(account=account).count() == call.records_before:
            assert time.monotonic() < deadline, "the call left no usage record"
            time.sleep(0.02)
        call.record = UsageRecord.objects.filter(account=account).order_by("-id").first()
    wallet = _wallet(account)
    call.charged = call.balance_before - wallet.balance
    assert wallet.held == 0
    assert not Hold.objects.filter(wallet=wallet, status="open").exists()


def assert_charged(call: Metered, expected: Decimal) -> None:
    assert expected > 0
    assert call.charged == expected
    assert (call.record.status, call.record.amount) == (200, expected)


def assert_not_charged(call: Metered, *, status: int, code: str | None) -> None:
    """Nothing charged, and the usage record says why: its status and (`code` not None) error code."""
    assert call.charged == 0
    assert (call.record.status, call.record.amount) == (status, 0)
    if code is not None:
        assert call.record.error_code == code


def last_request(fake, path: str) -> dict[str, Any]:
    sent = [record for record in fake.requests() if record["path"] == path]
    assert sent, f"nothing reached the upstream on {path}"
    record = sent[-1]
    record["headers"] = {name.lower(): value for name, value in record["headers"].items()}
    return record


def chat_charge_of_last_request(world: World, fake) -> Decimal:
    """What alpha-chat's last call costs for the usage the fake upstream reported (which follows from
    the request it got), for streams whose caller did not see the usage."""
    sent = last_request(fake, CHAT)
    counts = TextAnswer(CHAT, sent["json"], sent["headers"], {}, 0).counts
    return openai_cost(
        world.models["alpha-chat"], prompt=counts.input, cached=counts.cached, completion=counts.output
    )


def loop_streams(world: World) -> dict[str, float]:
    """How many streams have left the workers' stream loops, by how they left."""
    response = requests.get(
        f"{world.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    counts = {"left": 0.0, "caller_gone": 0.0, "timed_out": 0.0}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "gateway_stream_loop_streams_total":
                counts[sample.labels["outcome"]] += sample.value
    return counts


def loop_went(world: World, before: dict[str, float], outcome: str) -> bool:
    after = loop_streams(world)
    return after == {**before, outcome: before[outcome] + 1}


def final_response(sdk: openai.OpenAI, seen: list[str], **body: Any):
    """`responses.stream`'s final response, the types of the events before it put in `seen`."""
    with sdk.responses.stream(**body) as stream:
        seen.extend(event.type for event in stream)
        return stream.get_final_response()  # raises without a response.completed event


def final_message(sdk: anthropic.Anthropic, **body: Any):
    with sdk.messages.stream(**body) as stream:
        return stream.get_final_message()


USER = [{"role": "user", "content": PROMPT}]
# A reply of 32 words, one delta each (tests/fake_text_upstream.py).
LONG_PROMPT = "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d"
LONG_USER = [{"role": "user", "content": LONG_PROMPT}]


# OpenAI chat completions


def test_it_answers_a_chat_completion_and_charges_its_usage_exactly(world, fake, oa):
    fake.script(CHAT, {"cached_tokens": 9, "reasoning_tokens": 5})
    with metered(world.carol) as call:
        completion = oa.chat.completions.create(model="alpha-chat", messages=USER, temperature=0.5)

    assert completion.choices[0].message.content == REPLY
    usage = completion.usage
    assert (usage.prompt_tokens_details.cached_tokens, usage.completion_tokens_details.reasoning_tokens) == (
        9,
        5,
    )
    assert (usage.prompt_tokens, usage.completion_tokens) == (12, 14)
    # 3 * 2.345 + 9 * 0.5 + 14 * 9.875 = ¥149.785 per million: 0.000149785, rounded up (not to even).
    assert chat_cost(world.models["alpha-chat"], usage) == Decimal("0.00014979")
    assert_charged(call, chat_cost(world.models["alpha-chat"], usage))
    # Forwarded as sent but for the model; with the provider's key, never the caller's.
    sent = last_request(fake, CHAT)
    assert sent["json"] == {"model": "up-gpt", "messages": USER, "temperature": 0.5}
    assert sent["headers"]["authorization"] == f"Bearer {OPENAI_KEY}"
    assert world.key not in str(sent["headers"])


def test_it_streams_a_chat_completion_without_a_usage_chunk_the_caller_did_not_ask_for(world, fake, oa):
    with metered(world.carol) as call:
        stream = oa.chat.completions.create(model="alpha-chat", messages=USER, stream=True)
        deltas = [chunk.choices[0].delta.content or "" for chunk in stream]  # no chunk without choices

    assert "".join(deltas) == REPLY
    sent = last_request(fake, CHAT)
    assert sent["json"]["stream_options"] == {"include_usage": True}  # the gateway asked for usage
    assert sent["json"]["model"] == "up-gpt"
    # The caller saw no usage: what the upstream reported follows from the request it got.
    assert_charged(call, chat_charge_of_last_request(world, fake))


def test_it_streams_a_chat_completion_with_usage_last_when_asked(world, fake, oa):
    fake.script(CHAT, {"cached_tokens": 4})
    with metered(world.carol) as call:
        stream = oa.chat.completions.create(
            model="alpha-chat", messages=USER, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert chunks[-1].choices == []
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 4
    assert_charged(call, chat_cost(world.models["alpha-chat"], chunks[-1].usage))


def test_keep_alives_reach_both_sdks_which_skip_them_and_the_charge_is_exact(world, fake, oa, an):
    fake.script(CHAT, {"keep_alive": True, "event_delay": 0.01, "cached_tokens": 4})
    before = loop_streams(world)
    with metered(world.carol) as call:
        stream = oa.chat.completions.create(
            model="alpha-chat", messages=USER, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert_charged(call, chat_cost(world.models["alpha-chat"], chunks[-1].usage))
    assert loop_went(world, before, "left")  # relayed by the stream loop (api/stream_loop.py)

    # As the SDK reads the stream: one keep-alive before every event but the first, which the
    # gateway does not pass on (its answer starts with the first event).
    fake.script(CHAT, {"keep_alive": True, "event_delay": 0.01})
    with oa.chat.completions.with_streaming_response.create(
        model="alpha-chat", messages=USER, stream=True, stream_options={"include_usage": True}
    ) as raw:
        lines = list(raw.iter_lines())
    events = [line for line in lines if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert lines.count(": keep-alive") == len(events) - 1

    fake.script(MESSAGES, {"keep_alive": True, "event_delay": 0.01})
    before = loop_streams(world)
    streamed = an.messages.stream(model="alpha-haiku", max_tokens=256, messages=USER)
    with metered(world.carol) as call, streamed as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == REPLY
    assert_charged(call, messages_cost(world.models["alpha-haiku"], final.usage))
    assert loop_went(world, before, "left")


# OpenAI responses


def test_it_answers_a_response_and_charges_its_usage_exactly(world, fake, oa):
    fake.script(RESPONSES, {"cached_tokens": 6, "reasoning_tokens": 3})
    with metered(world.carol) as call:
        response = oa.responses.create(model="alpha-mini", input=PROMPT, instructions="Be brief.")

    assert response.output_text == REPLY
    assert response.usage.input_tokens_details.cached_tokens == 6
    # alpha-mini has no cached price (the input price applies) and no upstream model (its id is sent).
    assert_charged(call, responses_cost(world.models["alpha-mini"], response.usage))
    sent = last_request(fake, RESPONSES)
    assert sent["json"] == {"model": "alpha-mini", "input": PROMPT, "instructions": "Be brief."}


def test_it_streams_a_response_and_charges_the_usage_of_its_completed_event(world, fake, oa):
    with metered(world.carol) as call, oa.responses.stream(model="alpha-mini", input=PROMPT) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert "".join(deltas) == REPLY == final.output_text
    assert_charged(call, responses_cost(world.models["alpha-mini"], final.usage))


# Anthropic messages


def test_it_answers_a_message_and_charges_its_usage_with_cache_exactly(world, fake, an):
    fake.script(MESSAGES, {"cached_tokens": 120, "cache_creation_tokens": 33})
    with metered(world.carol) as call:
        message = an.messages.create(model="alpha-claude", max_tokens=256, messages=USER)

    assert message.content[0].text == REPLY
    assert (message.usage.cache_read_input_tokens, message.usage.cache_creation_input_tokens) == (120, 33)
    assert_charged(call, messages_cost(world.models["alpha-claude"], message.usage))
    sent = last_request(fake, MESSAGES)
    assert sent["json"] == {"model": "up-claude", "max_tokens": 256, "messages": USER}
    assert sent["headers"]["x-api-key"] == ANTHROPIC_KEY
    assert sent["headers"]["anthropic-version"]
    assert world.key not in str(sent["headers"])


def test_it_streams_a_message_and_charges_its_usage_exactly(world, fake, an):
    fake.script(MESSAGES, {"cached_tokens": 50, "cache_creation_tokens": 7})
    streamed = an.messages.stream(model="alpha-haiku", max_tokens=256, messages=USER)
    with metered(world.carol) as call, streamed as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert text == REPLY == final.content[0].text
    assert final.usage.output_tokens == len(REPLY.split())
    # alpha-haiku has neither cache price: both cache counts are at its input price.
    assert_charged(call, messages_cost(world.models["alpha-haiku"], final.usage))
    assert last_request(fake, MESSAGES)["json"]["model"] == "alpha-haiku"


def test_it_counts_message_tokens_for_free(world, fake, an):
    body = {"model": "alpha-claude", "messages": USER}
    with metered(world.carol, recorded=False) as call:
        counted = an.messages.count_tokens(**body)
        # Anthropic's own header works as well as a bearer token.
        raw = requests.post(
            f"{world.url}/v1/messages/count_tokens",
            json=body,
            headers={"x-api-key": world.key, "anthropic-version": "2023-06-01"},
            timeout=10,
        )

    assert counted.input_tokens == input_tokens_for(body) == raw.json()["input_tokens"]
    assert call.charged == 0
    assert last_request(fake, COUNT_TOKENS)["json"] == {**body, "model": "up-claude"}


def test_it_lists_the_text_models_to_the_anthropic_sdk(world, an):
    listed = [model.id for model in an.models.list().data]
    assert set(MODELS) <= set(listed)


# Failures cost nothing


@pytest.mark.parametrize("family", ["openai", "anthropic"])
def test_an_upstream_failing_on_every_try_charges_nothing(world, fake, oa, an, family):
    path = CHAT if family == "openai" else MESSAGES
    fake.script(path, *[{"status": 500, "error": "The server had an error"}] * 6)
    error = openai.APIStatusError if family == "openai" else anthropic.APIStatusError
    with metered(world.carol) as call, pytest.raises(error) as raised:
        if family == "openai":
            oa.chat.completions.create(model="alpha-chat", messages=USER)
        else:
            an.messages.create(model="alpha-claude", max_tokens=256, messages=USER)

    assert len([r for r in fake.requests() if r["path"] == path]) == 2  # the try and its one retry
    assert raised.value.status_code == 502
    assert_not_charged(call, status=502, code="upstream_error")


@pytest.mark.parametrize("family", ["openai", "anthropic"])
def test_an_upstream_400_passes_through_and_charges_nothing(world, fake, oa, an, family):
    path = CHAT if family == "openai" else MESSAGES
    fake.script(path, {"status": 400, "error": "messages: text content blocks must be non-empty"})
    error = openai.BadRequestError if family == "openai" else anthropic.BadRequestError
    with metered(world.carol) as call, pytest.raises(error, match="text content blocks must be non-empty"):
        if family == "openai":
            oa.chat.completions.create(model="alpha-chat", messages=USER)
        else:
            an.messages.create(model="alpha-claude", max_tokens=256, messages=USER)

    assert len([r for r in fake.requests() if r["path"] == path]) == 1  # a refusal is not retried
    # The upstream's own verdict: its status says why (its body, Anthropic's above all, may carry no code).
    assert_not_charged(call, status=400, code=None)


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_a_chat_stream_cut_before_its_end_raises_and_charges_nothing(world, fake, oa, framing):
    fake.script(CHAT, {"action": "cut_stream", "after": 4, "framing": framing})
    with metered(world.carol) as call, pytest.raises(openai.APIError) as raised:
        stream = oa.chat.completions.create(model="alpha-chat", messages=USER, stream=True)
        for chunk in stream:
            assert chunk.choices[0] is not None

    assert not isinstance(raised.value, openai.APIConnectionError)  # an error event, not a torn stream
    assert_not_charged(call, status=502, code="upstream_stream_cut")


def test_a_response_stream_cut_before_its_end_raises_and_charges_nothing(world, fake, oa):
    fake.script(RESPONSES, {"action": "cut_stream", "after": 6})
    seen: list[str] = []
    with metered(world.carol) as call, pytest.raises((openai.APIError, RuntimeError)) as raised:
        final_response(oa, seen, model="alpha-mini", input=PROMPT)

    # The gateway said so: an error event the SDK raised on, or one it passed on before giving up.
    assert isinstance(raised.value, openai.APIError) or seen[-1] in ("error", "response.failed")
    assert_not_charged(call, status=502, code="upstream_stream_cut")


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_a_message_stream_cut_before_its_end_raises_and_charges_nothing(world, fake, an, framing):
    # Closed without chunking after everything but message_stop: only the missing final event tells.
    after = 3 if framing == "chunked" else 99
    fake.script(MESSAGES, {"action": "cut_stream", "after": after, "framing": framing})
    with metered(world.carol) as call, pytest.raises(anthropic.APIStatusError):
        final_message(an, model="alpha-claude", max_tokens=256, messages=USER)

    assert_not_charged(call, status=502, code="upstream_stream_cut")


def test_an_upstream_error_event_mid_stream_raises_and_charges_nothing(world, fake, an):
    fake.script(MESSAGES, {"action": "stream_error", "after": 4})
    with metered(world.carol) as call, pytest.raises(anthropic.APIStatusError, match="upstream_stream_error"):
        final_message(an, model="alpha-claude", max_tokens=256, messages=USER)

    assert_not_charged(call, status=502, code="upstream_stream_error")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {"model": "alpha-chat", "messages": LONG_USER}),
        (RESPONSES, {"model": "alpha-chat", "input": LONG_PROMPT}),
        (MESSAGES, {"model": "alpha-haiku", "max_tokens": 256, "messages": LONG_USER}),
    ],
    ids=["chat", "responses", "messages"],
)
def test_a_caller_who_leaves_mid_stream_pays_the_input_and_the_output_received(world, fake, path, body):
    # The caller reads three text deltas and leaves; the upstream would go on for 8 s more. The stream
    # loop relays the events (they come apart) and finds the caller gone at its next write: the
    # upstream's connection closes at once. Neither model has a public tokenizer: the output is
    # bounded by its UTF-8 bytes; the input is Anthropic's reported count, or the hold's ceiling.
    fake.script(path, {"event_delay": 0.25})
    before = loop_streams(world)
    with metered(world.carol) as call:
        left_at = read_deltas_then_leave(stream_open(world.url, world.key, path, body), deltas=3)
        upstream = stream_record(fake, path)

    assert upstream["stream"]["ended"] == "disconnected"
    assert upstream["stream"]["at"] - left_at < 1
    assert upstream["stream"]["sent"] < upstream["stream"]["events"] - 20
    output = len(received_text(upstream).encode())
    model = world.models[body["model"]]
    if path == MESSAGES:
        expected = anthropic_cost(
            model, input=input_tokens_for(upstream["json"]), cache_read=0, cache_creation=0, output=output
        )
    else:
        prompt = input_ceiling_tokens(body={**body, "stream": True})
        expected = openai_cost(model, prompt=prompt, cached=0, completion=output)
    record = call.record  # written with the capture, then given the call's end
    deadline = time.monotonic() + 5
    while record.status != 499 and time.monotonic() < deadline:
        time.sleep(0.02)
        record.refresh_from_db()
    assert (call.charged, record.amount) == (expected, expected)
    assert (record.status, record.error_code) == (499, "client_closed_request")
    assert record.output_tokens == output >= len("Fake reply to: ")
    assert loop_went(world, before, "caller_gone")


# The gateway's own refusals, in each family's shape


def test_an_unknown_model_is_not_found_to_both_sdks(world, fake, oa, an):
    with metered(world.carol, recorded=False) as call, pytest.raises(anthropic.NotFoundError) as raised:
        an.messages.create(model="no-such-model", max_tokens=256, messages=USER)
    assert raised.value.body["type"] == "error"  # Anthropic's error shape
    assert call.charged == 0

    with pytest.raises(openai.NotFoundError) as raised:
        oa.chat.completions.create(model="no-such-model", messages=USER)
    assert raised.value.body["message"]  # the compatible shape: {"error": {"message", "type", "code"}}
    assert fake.requests() == []


def test_an_insufficient_balance_is_permission_denied_to_both_sdks(world, fake):
    with (
        openai.OpenAI(base_url=f"{world.url}/v1", api_key=world.poor_key, max_retries=0) as poor,
        metered(world.dave) as call,
        pytest.raises(openai.PermissionDeniedError),
    ):
        poor.chat.completions.create(model="alpha-chat", messages=USER)
    assert_not_charged(call, status=403, code="INSUFFICIENT_BALANCE")

    with (
        anthropic.Anthropic(base_url=world.url, api_key=world.poor_key, max_retries=0) as poor,
        metered(world.dave) as call,
        pytest.raises(anthropic.PermissionDeniedError) as raised,
    ):
        poor.messages.create(model="alpha-claude", max_tokens=1024, messages=USER)
    assert raised.value.body["type"] == "error"  # Anthropic's error shape
    assert_not_charged(call, status=403, code="INSUFFICIENT_BALANCE")
    assert fake.requests() == []


# The stream loop (api/stream_loop.py): under gunicorn's gevent worker, the events after a stream's
# first read are relayed by the worker's loop, straight to the caller's connection. The upstream's
# events come apart (event_delay), so the loop takes each of these streams over after its first event.


def test_a_stream_read_to_its_end_in_the_loop_gives_its_upstream_connection_back(world, fake, oa):
    for _ in range(2):
        fake.script(CHAT, {"event_delay": 0.02})
        before = loop_streams(world)
        stream = oa.chat.completions.create(model="alpha-chat", messages=USER, stream=True)
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream) == REPLY
        assert loop_went(world, before, "left")

    first, second = [record for record in fake.requests() if record["path"] == CHAT][-2:]
    assert first["client_port"] == second["client_port"]  # the second call reused the connection


def test_the_stream_loop_relays_a_response_whole_and_charges_it_once(world, fake, oa):
    # Chat completions and messages through the loop: the keep-alive test above.
    fake.script(RESPONSES, {"event_delay": 0.02})
    before = loop_streams(world)
    with metered(world.carol) as call, oa.responses.stream(model="alpha-mini", input=PROMPT) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == REPLY == final.output_text
    assert_charged(call, responses_cost(world.models["alpha-mini"], final.usage))
    assert loop_went(world, before, "left")


def test_the_stream_loop_answers_http_1_0_unchunked_and_closes_at_the_end(world, fake):
    fake.script(CHAT, {"event_delay": 0.02})
    body = json.dumps({"model": "alpha-chat", "messages": USER, "stream": True}).encode()
    host, port = world.url.removeprefix("http://").split(":")
    before = loop_streams(world)
    with metered(world.carol) as call, socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.0\r\nHost: {host}:{port}\r\n".encode()
            + f"Authorization: Bearer {world.key}\r\n".encode()
            + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while data := sock.recv(65536):  # the server closes the connection at the body's end
            received += data

    head, _, stream = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding" not in head.lower()
    events = [event for event in stream.decode().split("\n\n") if event]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == REPLY
    expected = chat_charge_of_last_request(world, fake)
    assert_charged(call, expected)
    assert loop_went(world, before, "left")


def test_an_upstream_silent_past_its_timeout_in_the_stream_loop_raises_and_charges_nothing(world, fake, oa):
    fake.script(CHAT, {"event_delay": 2.5})  # its upstream waits 1 s at most between two reads
    before = loop_streams(world)
    with metered(world.carol) as call, pytest.raises(openai.APIError) as raised:
        for _chunk in oa.chat.completions.create(model="alpha-brief", messages=USER, stream=True):
            pass

    assert not isinstance(raised.value, openai.APIConnectionError)  # an error event, not a torn stream
    assert_not_charged(call, status=502, code="upstream_stream_cut")
    assert loop_went(world, before, "timed_out")


def test_a_stream_cut_or_failing_in_the_stream_loop_raises_and_charges_nothing(world, fake, oa, an):
    fake.script(CHAT, {"action": "cut_stream", "after": 4, "event_delay": 0.02})
    before = loop_streams(world)
    with metered(world.carol) as call, pytest.raises(openai.APIError) as raised:
        for _chunk in oa.chat.completions.create(model="alpha-chat", messages=USER, stream=True):
            pass
    assert not isinstance(raised.value, openai.APIConnectionError)
    assert_not_charged(call, status=502, code="upstream_stream_cut")
    assert loop_went(world, before, "left")

    fake.script(MESSAGES, {"action": "stream_error", "after": 4, "event_delay": 0.02})
    before = loop_streams(world)
    with metered(world.carol) as call, pytest.raises(anthropic.APIStatusError, match="upstream_stream_error"):
        final_message(an, model="alpha-claude", max_tokens=256, messages=USER)
    assert_not_charged(call, status=502, code="upstream_stream_error")
    assert loop_went(world, before, "left")
