"""Tokens per minute on the text endpoints: a call is admitted by its token ceiling (its input ceiling
plus its output limit) against the group's `tpm` (per credential) and the key's own; the window is
corrected to the usage at capture and a failed call gives its ceiling back. Concurrent long prompts on
PostgreSQL (in Redis with REDIS_URL); the rest on SQLite too, where the windows are per process."""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal

import pytest
from django.test import Client

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from chat.validation import input_ceiling_tokens
from groups.services import group_upsert
from keys.services import ApiKeyLimitsInput, api_key_create, api_key_limits_set
from tests.billing.conftest import postgres_only
from tests.chat.conftest import OPENAI_BASE, sse_body
from tests.factories import text_model_make
from tests.rate_windows import token_window_wait

pytestmark = pytest.mark.django_db

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
MAX_TOKENS = 200


def long_body(*, chars: int = 4000, stream: bool = False, max_tokens: int = MAX_TOKENS) -> dict:
    body = {
        "model": "alpha-chat",
        "messages": [{"role": "user", "content": "Summarise this. " + "lorem ipsum " * (chars // 12)}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
    return body


def ceiling_of(body: dict) -> int:
    """The tokens a call of `body` is admitted by: its input ceiling plus its output limit."""
    return input_ceiling_tokens(body=body) + body["max_tokens"]


def completion(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "vendor-chat-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def post(client, key: str, body: dict, *, path: str = "/v1/chat/completions", **headers: str):
    return client.post(
        path, data=json.dumps(body), content_type="application/json", headers={"x-api-key": key, **headers}
    )


def key_with_tpm(account, group, tpm: int | None) -> tuple:
    return api_key_create(account=account, group=group, label="agent", limits=ApiKeyLimitsInput(tpm=tpm))


def chat_group_tpm(tpm: int) -> None:
    group_upsert(
        group_id=3,
        name="Demo-Chat",
        status="active",
        image_enabled=False,
        billing="balance",
        allow_group_override=True,
        rpm=0,
        concurrency=0,
        tpm=tpm,
    )


@pytest.fixture
def rich_tara(tara):
    """Tara with enough money that only the token limits refuse."""
    from billing.ledger import wallet_top_up

    wallet_top_up(account=tara, amount="100.00", reference="tpm tests")
    return tara


@pytest.fixture
def fresh_window():
    """The test's calls all fall in one minute's window."""
    token_window_wait(seconds=20)


def assert_tpm_refused(response, *, native: bool = False) -> str:
    assert response.status_code == 429, response.content
    assert 1 <= int(response["Retry-After"]) <= 60
    body = response.json()
    if native:
        assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
        assert body["error"]["message"].startswith("rate_limit_exceeded: ")
        return body["error"]["message"]
    assert (body["error"]["type"], body["error"]["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    return body["error"]["message"]


@pytest.mark.parametrize("whose", ["group", "key"])
def test_a_call_is_refused_when_the_window_plus_its_ceiling_is_over_tpm(
    client, upstream, chat_model, rich_tara, chat_group, fresh_window, whose
):
    body = long_body()
    ceiling = ceiling_of(body)
    tpm = ceiling + ceiling // 2
    if whose == "group":
        chat_group_tpm(tpm)
    _, key = key_with_tpm(rich_tara, chat_group, tpm if whose == "key" else None)
    # The first call used nearly all of its ceiling: the window keeps that.
    upstream.post(CHAT_URL, json=completion(ceiling - MAX_TOKENS - 10, MAX_TOKENS))
    start = Wallet.objects.get(account=rich_tara).balance

    assert post(client, key, body).status_code == 200
    refused = post(client, key, body, **{"X-Request-Id": "req-over"})

    message = assert_tpm_refused(refused)
    assert f"{tpm} tokens (input + output) per minute" in message
    assert f"up to {ceiling}" in message
    assert len(upstream.calls) == 1
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert Hold.objects.filter(status="open").count() == 0
    charged = Wallet.objects.get(account=rich_tara).balance
    assert start - charged == UsageRecord.objects.get(status=200).amount
    assert UsageRecord.objects.get(request_id="req-over").error_code == "rate_limit_exceeded"


def test_the_correction_at_capture_lets_the_next_call_in(
    client, upstream, chat_model, rich_tara, chat_group, fresh_window
):
    body = long_body()
    ceiling = ceiling_of(body)
    _, key = key_with_tpm(rich_tara, chat_group, ceiling + ceiling // 2)
    # Each call used a quarter of its ceiling: the window holds that, not the ceiling.
    upstream.post(CHAT_URL, json=completion(ceiling // 4 - 5, 5))

    statuses = [post(client, key, body).status_code for _ in range(4)]

    # Uncorrected, the second call would not fit; corrected, two quarters and a ceiling fit in one
    # and a half ceilings, three quarters and a ceiling do not.
    assert statuses == [200, 200, 200, 429]
    assert len(upstream.calls) == 3


def test_a_failed_call_gives_its_whole_ceiling_back(
    client, upstream, chat_model, rich_tara, chat_group, fresh_window
):
    body = long_body()
    ceiling = ceiling_of(body)
    _, key = key_with_tpm(rich_tara, chat_group, ceiling + ceiling // 5)
    upstream.post(CHAT_URL, status=400, json={"error": {"message": "bad", "type": "invalid_request_error"}})
    upstream.post(CHAT_URL, json=completion(ceiling - MAX_TOKENS, MAX_TOKENS))

    failed = post(client, key, body)
    served = post(client, key, body)

    assert failed.status_code == 400
    assert served.status_code == 200, served.content  # the failed call's ceiling was given back
    assert_tpm_refused(post(client, key, body))  # and the served one kept what it used


def test_a_streamed_call_is_corrected_when_its_stream_ends(
    client, upstream, chat_model, rich_tara, chat_group, fresh_window
):
    body = long_body(stream=True)
    ceiling = ceiling_of(body)
    _, key = key_with_tpm(rich_tara, chat_group, ceiling + 150)
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "vendor-chat-1"}
    stream = sse_body(
        ("", {**chunk, "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}),
        ("", {**chunk, "choices": [], "usage": usage}),
        ("", "[DONE]"),
    )
    upstream.post(CHAT_URL, body=stream, content_type="text/event-stream")

    first = post(client, key, body)
    b"".join(first.streaming_content)
    second = post(client, key, body)
    b"".join(second.streaming_content)

    assert (first.status_code, second.status_code) == (200, 200)  # 120 tokens + a ceiling fit
    assert UsageRecord.objects.filter(status=200, input_tokens=100, output_tokens=20).count() == 2
    assert_tpm_refused(post(client, key, body))  # 240 + a ceiling do not


def test_messages_answer_the_refusal_in_their_own_shape(
    client, upstream, rich_tara, chat_group, fresh_window
):
    from tests.chat.conftest import ANTHROPIC_BASE, KEY_ENV, PROVIDER_KEY  # noqa: F401
    from tests.factories import upstream_make

    anthropic = upstream_make(
        name="anthropic-main", base_url=ANTHROPIC_BASE, api_key_env=KEY_ENV, kind="anthropic"
    )
    text_model_make(model_id="alpha-claude", group=chat_group, upstreams=[anthropic], max_output_tokens=500)
    body = {**long_body(), "model": "alpha-claude"}
    _, key = key_with_tpm(rich_tara, chat_group, ceiling_of(body) - 1)

    refused = post(client, key, body, path="/v1/messages", **{"anthropic-version": "2023-06-01"})

    message = assert_tpm_refused(refused, native=True)
    assert "set a lower output limit" in message  # the ceiling alone is over the key's tpm
    assert not upstream.calls


def test_token_counting_counts_against_rpm_but_not_tpm(
    client, upstream, rich_tara, chat_group, fresh_window, demo_upstream
):
    text_model_make(model_id="alpha-chat", group=chat_group, upstreams=[demo_upstream])
    _, key = api_key_create(
        account=rich_tara, group=chat_group, label="agent", limits=ApiKeyLimitsInput(tpm=10, rpm=3)
    )
    body = {"model": "alpha-chat", "messages": long_body()["messages"]}

    statuses = [post(client, key, body, path="/v1/messages/count_tokens").status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]  # a tpm of 10 refuses none; the key's rpm of 3 does


@pytest.mark.django_db(transaction=True)
def test_a_changed_tpm_applies_from_the_next_call(client, upstream, chat_model, rich_tara, chat_group):
    token_window_wait(seconds=20)
    body = long_body()
    ceiling = ceiling_of(body)
    api_key, key = key_with_tpm(rich_tara, chat_group, ceiling - 1)
    upstream.post(CHAT_URL, json=completion(50, 5))
    assert_tpm_refused(post(client, key, body))

    api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput(tpm=ceiling))

    assert post(client, key, body).status_code == 200


# --- concurrent long prompts (PostgreSQL: each request thread has its own connection) -----------------


@pytest.mark.postgres
@postgres_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("whose", ["group", "key"])
def test_concurrent_long_prompts_are_served_only_as_many_as_the_tpm_admits(
    upstream, chat_model, rich_tara, chat_group, whose
):
    token_window_wait(seconds=20)
    calls, admitted = 16, 3
    body = long_body(chars=6000)
    ceiling = ceiling_of(body)
    tpm = admitted * ceiling + ceiling // 2
    if whose == "group":
        chat_group_tpm(tpm)
    _, key = key_with_tpm(rich_tara, chat_group, tpm if whose == "key" else None)
    start = Wallet.objects.get(account=rich_tara).balance
    lock = threading.Lock()
    refused = [0]

    def answer(request):
        # Hold every admitted call upstream until all the others have been refused: every ceiling
        # is in the window at once, none corrected yet.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if refused[0] >= calls - admitted:
                    break
            time.sleep(0.01)
        return 200, {"Content-Type": "application/json"}, json.dumps(completion(1000, 10))

    upstream.add_callback("POST", CHAT_URL, callback=answer)
    barrier = threading.Barrier(calls)
    statuses: list[int] = [0] * calls

    def run(index: int) -> None:
        from django.db import connection

        try:
            barrier.wait(timeout=30)
            response = post(Client(), key, body, **{"X-Request-Id": f"req-{index}"})
            statuses[index] = response.status_code
            if response.status_code == 429:
                with lock:
                    refused[0] += 1
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)

    assert sorted(statuses) == [200] * admitted + [429] * (calls - admitted)
    assert len(upstream.calls) == admitted
    cost = UsageRecord.objects.filter(status=200).values_list("amount", flat=True)
    assert len(cost) == admitted
    assert Wallet.objects.get(account=rich_tara).balance == start - sum(cost, Decimal("0"))
    assert not Hold.objects.filter(status="open").exists()
    assert (
        UsageRecord.objects.filter(status=429, error_code="rate_limit_exceeded").count() == calls - admitted
    )
    assert ledger_check() == []
    # Captured, the three calls hold their 1010 tokens each, not their ceilings: the next ones fit.
    assert post(Client(), key, body).status_code == 200
    assert post(Client(), key, body).status_code == 200
