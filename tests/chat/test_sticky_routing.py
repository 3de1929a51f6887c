"""Cache-aware routing on the text endpoints: a model with two upstreams of one priority behind
`responses`; the calls of one conversation (`prompt_cache_key`, `user`, `metadata.user_id`) all go to
one upstream, different conversations spread, `sticky_seconds = 0` spreads, and a disabled upstream,
an open circuit or a failover (across kinds too) moves the conversation to the upstream that answered.
The mapping's keys in Redis are digests; without Redis each process keeps its own; no value of the
conversation fields fails a call."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from billing.ledger import wallet_top_up
from billing.models import Hold, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.chat.conftest import KEY_ENV, PROVIDER_KEY, sse_body
from tests.chat.test_fuzz_bodies import JSON_VALUES
from tests.factories import text_model_make, upstream_make
from upstreams import affinity
from upstreams.circuit import circuit_record_failure, circuit_reset
from upstreams.services import upstream_upsert

pytestmark = pytest.mark.django_db

BASES = {"a": "https://a.provider.test/v1", "b": "https://b.provider.test/v1"}
ANTHROPIC_BASE = "https://c.anthropic.test/v1"
LOCMEM = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "igw-test"}}
# Distinct conversations (or calls without stickiness) between two equal upstreams all land on one
# 2 x 2^-20 of the time.
SPREAD = 21
CALL_COST = Decimal("0.00006")  # 10 input x ¥2 + 5 output x ¥8, per million tokens
USER = {"role": "user", "content": "Hi"}

CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "vendor-chat-1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}
RESPONSES_ANSWER = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1700000000,
    "status": "completed",
    "model": "vendor-chat-1",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello!", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
}
MESSAGES_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "vendor-chat-1",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5},
}

# (endpoint, a body naming the conversation `{key}`)
CONVERSATIONS = {
    "chat prompt_cache_key": ("/v1/chat/completions", {"messages": [USER], "prompt_cache_key": "{key}"}),
    "chat user": ("/v1/chat/completions", {"messages": [USER], "user": "{key}"}),
    "responses prompt_cache_key": ("/v1/responses", {"input": "Hi", "prompt_cache_key": "{key}"}),
    "responses user": ("/v1/responses", {"input": "Hi", "user": "{key}"}),
    "messages metadata.user_id": (
        "/v1/messages",
        {"max_tokens": 64, "messages": [USER], "metadata": {"user_id": "{key}"}},
    ),
}


@pytest.fixture
def pair(db, monkeypatch):
    """Two `openai` upstreams of one priority and weight."""
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    return {
        name: upstream_make(name=f"openai-{name}", base_url=base, api_key_env=KEY_ENV)
        for name, base in BASES.items()
    }


@pytest.fixture
def answering(upstream):
    """Both upstreams answer every chat completion and response."""
    for base in BASES.values():
        upstream.post(f"{base}/chat/completions", json=CHAT_ANSWER)
        upstream.post(f"{base}/responses", json=RESPONSES_ANSWER)
    return upstream


def sticky_model(chat_group, upstreams, **fields):
    return text_model_make(
        model_id="alpha-chat", group=chat_group, upstreams=upstreams, upstream_model="vendor-chat-1", **fields
    )


@pytest.fixture
def model(chat_group, pair):
    return sticky_model(chat_group, list(pair.values()))


def body_for(conversation: str, key: Any) -> tuple[str, dict[str, Any]]:
    path, template = CONVERSATIONS[conversation]
    text = json.dumps(template).replace('"{key}"', json.dumps(key))
    return path, {"model": "alpha-chat", **json.loads(text)}


def post(client, path, body, key):
    return client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def call(client, tara_key, conversation: str, key: Any):
    path, body = body_for(conversation, key)
    response = post(client, path, body, tara_key)
    assert response.status_code == 200, response.content[:500]
    return response


def served(upstream) -> list[str]:
    """Which upstream (a, b, c) each call to the providers went to, in order."""
    return [urlsplit(made.request.url).hostname.split(".")[0] for made in upstream.calls]


def recorded_upstreams() -> list[str]:
    return list(UsageRecord.objects.order_by("created_at", "id").values_list("upstream", flat=True))


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_the_calls_of_one_conversation_all_go_to_one_upstream(
    client, answering, model, tara, tara_key, conversation
):
    for _ in range(12):
        call(client, tara_key, conversation, "conversation-1")

    assert len(answering.calls) == 12 and len(set(served(answering))) == 1
    records = recorded_upstreams()
    assert len(records) == 12 and len(set(records)) == 1
    assert Wallet.objects.get(account=tara).balance == Decimal("1.00") - 12 * CALL_COST
    assert ledger_check() == []


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
def test_different_conversations_spread_over_the_upstreams(client, answering, model, tara_key, conversation):
    for index in range(SPREAD):
        call(client, tara_key, conversation, f"conversation-{index}")

    assert set(served(answering)) == {"a", "b"}
    assert set(recorded_upstreams()) == {"openai-a", "openai-b"}


def test_prompt_cache_key_names_the_conversation_before_user(client, answering, model, tara_key):
    for index in range(SPREAD):
        path, body = body_for("chat prompt_cache_key", "conversation-1")
        assert post(client, path, {**body, "user": f"user-{index}"}, tara_key).status_code == 200

    assert len(set(served(answering))) == 1


def test_calls_without_a_conversation_spread(client, answering, model, tara_key):
    for _ in range(SPREAD):
        assert (
            post(
                client, "/v1/chat/completions", {"model": "alpha-chat", "messages": [USER]}, tara_key
            ).status_code
            == 200
        )

    assert set(served(answering)) == {"a", "b"}


def test_sticky_seconds_0_spreads_one_conversation(client, answering, chat_group, pair, tara_key):
    sticky_model(chat_group, list(pair.values()), sticky_seconds=0)

    for _ in range(SPREAD):
        call(client, tara_key, "chat prompt_cache_key", "conversation-1")

    assert set(served(answering)) == {"a", "b"}
    if settings.REDIS_URL:
        assert not list(redis.Redis.from_url(settings.REDIS_URL).scan_iter(match="*affinity:*"))


def test_a_streamed_conversation_stays_on_one_upstream(client, upstream, model, tara, tara_key):
    events = [
        ("", {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "v",
              "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}),
        ("", {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "v", "choices": [],
              "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}),
        ("", "[DONE]"),
    ]  # fmt: skip
    for base in BASES.values():
        upstream.post(f"{base}/chat/completions", body=sse_body(*events), content_type="text/event-stream")

    for _ in range(8):
        path, body = body_for("chat prompt_cache_key", "conversation-1")
        response = post(client, path, {**body, "stream": True}, tara_key)
        assert response.status_code == 200
        assert b"[DONE]" in b"".join(response.streaming_content)

    assert len(upstream.calls) == 8 and len(set(served(upstream))) == 1
    assert len(set(recorded_upstreams())) == 1
    assert Wallet.objects.get(account=tara).balance == Decimal("1.00") - 8 * CALL_COST


def first_and_other(answering) -> tuple[str, str]:
    first = served(answering)[0]
    return first, "b" if first == "a" else "a"


def test_a_disabled_upstream_moves_the_conversation_to_the_one_that_answered(
    client, answering, model, pair, tara_key, django_capture_on_commit_callbacks
):
    call(client, tara_key, "chat user", "conversation-1")
    first, other = first_and_other(answering)

    def enable(name: str, enabled: bool) -> None:
        with django_capture_on_commit_callbacks(execute=True):  # the commit's cache invalidation
            upstream_upsert(
                name=f"openai-{name}", kind="openai", base_url=BASES[name], api_key_env=KEY_ENV,
                timeout_seconds=30, priority=0, weight=1, enabled=enabled,
            )  # fmt: skip

    enable(first, False)
    for _ in range(4):
        call(client, tara_key, "chat user", "conversation-1")
    enable(first, True)
    for _ in range(8):
        call(client, tara_key, "chat user", "conversation-1")

    assert served(answering) == [first] + [other] * 12
    assert recorded_upstreams() == [f"openai-{first}"] + [f"openai-{other}"] * 12


def test_an_open_circuit_moves_the_conversation_to_the_one_that_answered(
    client, answering, model, pair, tara_key
):
    call(client, tara_key, "responses prompt_cache_key", "conversation-1")
    first, other = first_and_other(answering)

    circuit_record_failure(upstream_id=pair[first].pk, threshold=1)
    for _ in range(4):
        call(client, tara_key, "responses prompt_cache_key", "conversation-1")
    circuit_reset(upstream_id=pair[first].pk)
    for _ in range(8):
        call(client, tara_key, "responses prompt_cache_key", "conversation-1")

    assert served(answering) == [first] + [other] * 12  # the open circuit was never called


def test_a_failover_across_kinds_moves_the_conversation_to_the_upstream_that_answered(
    client, upstream, chat_group, tara, tara_key, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    openai = upstream_make(name="openai-a", base_url=BASES["a"], api_key_env=KEY_ENV)
    anthropic = upstream_make(
        name="anthropic-c", base_url=ANTHROPIC_BASE, api_key_env=KEY_ENV, kind="anthropic"
    )
    sticky_model(chat_group, [openai, anthropic])
    chat_url, messages_url = f"{BASES['a']}/chat/completions", f"{ANTHROPIC_BASE}/messages"
    upstream.post(chat_url, json=CHAT_ANSWER)
    upstream.post(messages_url, json=MESSAGES_ANSWER)
    call(client, tara_key, "chat prompt_cache_key", "conversation-1")
    first = served(upstream)[0]
    other = "c" if first == "a" else "a"
    failing = chat_url if first == "a" else messages_url

    upstream.replace("POST", failing, json={"error": {"message": "down", "type": "api_error"}}, status=500)
    failed_over = call(client, tara_key, "chat prompt_cache_key", "conversation-1")
    upstream.replace("POST", failing, json=CHAT_ANSWER if first == "a" else MESSAGES_ANSWER)
    for _ in range(6):
        answer = call(client, tara_key, "chat prompt_cache_key", "conversation-1")

    # Each upstream got its own kind's body; the caller got chat completions either way.
    assert served(upstream) == [first, first, other] + [other] * 6
    for made in upstream.calls:
        sent = json.loads(made.request.body)
        if made.request.url == chat_url:
            assert sent["prompt_cache_key"] == "conversation-1"
        else:
            assert sent["max_tokens"] == 1024 and "prompt_cache_key" not in sent
    for response in (failed_over, answer):
        assert response.json()["choices"][0]["message"]["content"] == "Hello!"
    names = {"a": "openai-a", "c": "anthropic-c"}
    assert recorded_upstreams() == [names[first]] + [names[other]] * 7
    assert Hold.objects.filter(status="open").count() == 0
    assert Wallet.objects.get(account=tara).balance == Decimal("1.00") - 8 * CALL_COST


@pytest.mark.skipif(not settings.REDIS_URL, reason="inspects the shared Redis: needs REDIS_URL")
def test_the_mapping_in_redis_is_keyed_by_a_digest_and_holds_no_caller_text(
    client, answering, model, tara_key
):
    secret = "conversation-of-someone-7f3a"
    call(client, tara_key, "messages metadata.user_id", secret)

    client_redis = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client_redis.scan_iter(match="*affinity:*"))
    digest = hashlib.sha256(f"chat.textmodel:{model.pk}\n{secret}".encode()).hexdigest()
    assert keys == [cache.make_key(f"affinity:{digest}").encode()]
    answered = UsageRecord.objects.get().upstream
    assert client_redis.get(keys[0]) == str(model.upstreams.get(name=answered).pk).encode()
    assert 3590 <= client_redis.ttl(keys[0]) <= 3600  # the model's sticky_seconds
    for stored in client_redis.scan_iter():
        assert secret.encode() not in stored
        if client_redis.type(stored) == b"string":
            assert secret.encode() not in (client_redis.get(stored) or b"")


def test_without_redis_each_process_keeps_its_conversations(client, answering, chat_group, pair, tara_key):
    with override_settings(REDIS_URL="", CACHES=LOCMEM):
        model = sticky_model(chat_group, list(pair.values()))
        for _ in range(12):
            call(client, tara_key, "chat prompt_cache_key", "conversation-1")

        assert len(set(served(answering))) == 1
        sticky = affinity.affinity_make(
            model_label="chat.TextModel", model_pk=model.pk, conversation_key="conversation-1", seconds=3600
        )
        answered = model.upstreams.get(name=UsageRecord.objects.first().upstream)
        assert affinity._local.get(sticky.key) == answered.pk
        assert cache.get(sticky.key) is None


# --- any value in the conversation fields --------------------------------------------------------

FUZZ = hypothesis_settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PLACES = [
    ("/v1/chat/completions", ("prompt_cache_key",)),
    ("/v1/chat/completions", ("user",)),
    ("/v1/responses", ("prompt_cache_key",)),
    ("/v1/responses", ("user",)),
    ("/v1/messages", ("metadata",)),
    ("/v1/messages", ("metadata", "user_id")),
]
BASE_BODIES = {
    "/v1/chat/completions": {"model": "demo-sticky", "messages": [USER]},
    "/v1/responses": {"model": "demo-sticky", "input": "Hi"},
    "/v1/messages": {"model": "demo-sticky", "max_tokens": 64, "messages": [USER]},
}


@pytest.fixture
def demo_pair_model(chat_group, tara):
    """A model of two `demo` upstreams (answered in process), and money for many calls."""
    upstreams = [
        upstream_upsert(
            name=f"demo-{name}", kind="demo", base_url="", api_key_env="", timeout_seconds=30, priority=0,
            weight=1, enabled=True,
        )[0]
        for name in "ab"
    ]  # fmt: skip
    wallet_top_up(account=tara, amount="1000.00", reference="fuzz")
    return text_model_make(model_id="demo-sticky", group=chat_group, upstreams=upstreams)


@pytest.mark.parametrize(("path", "where"), PLACES)
@FUZZ
@given(value=JSON_VALUES)
def test_no_value_in_a_conversation_field_fails_a_call(client, demo_pair_model, tara_key, path, where, value):
    body = json.loads(json.dumps(BASE_BODIES[path]))
    holder = body
    for name in where[:-1]:
        holder = holder.setdefault(name, {})
    holder[where[-1]] = value

    response = client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {tara_key}"},
    )

    assert response.status_code < 500, response.content[:500]
    if response.status_code != 200:
        payload = response.json()
        assert payload["error"]["message"]
    assert Hold.objects.filter(status="open").count() == 0
