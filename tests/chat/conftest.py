"""Fixtures of the text endpoint tests: a chat group with OpenAI-style and Anthropic-style models in
front of upstreams reached only through `responses`, an account with a small balance and its key."""

from __future__ import annotations

import json
from typing import Any

import pytest
import responses as responses_lib
from django.core.cache import cache

from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import Hold
from keys.services import api_key_create
from tests.factories import text_model_make, upstream_make

OPENAI_BASE = "https://api.provider.test/v1"
ANTHROPIC_BASE = "https://api.anthropic.test/v1"
KEY_ENV = "IGW_TEST_TEXT_PROVIDER_KEY"
PROVIDER_KEY = "sk-test-text-provider-0123456789abcdef"


@pytest.fixture(autouse=True)
def _fresh_limits_and_circuits():
    """Rate-limit counters and circuit states live in the cache, keyed by ids the tests reuse."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def openai_upstream(db, monkeypatch):
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    return upstream_make(name="openai-main", base_url=OPENAI_BASE, api_key_env=KEY_ENV, kind="openai")


@pytest.fixture
def anthropic_upstream(db, monkeypatch):
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    return upstream_make(
        name="anthropic-main", base_url=ANTHROPIC_BASE, api_key_env=KEY_ENV, kind="anthropic"
    )


@pytest.fixture
def chat_model(chat_group, openai_upstream):
    return text_model_make(
        model_id="alpha-chat",
        group=chat_group,
        upstreams=[openai_upstream],
        upstream_model="vendor-chat-1",
        cached_input_price="0.50",
        max_output_tokens=1000,
    )


@pytest.fixture
def claude_model(chat_group, anthropic_upstream):
    return text_model_make(
        model_id="alpha-claude",
        group=chat_group,
        upstreams=[anthropic_upstream],
        upstream_model="vendor-claude-1",
        input_price="3.00",
        output_price="15.00",
        cached_input_price="0.30",
        cache_write_price="3.75",
        max_output_tokens=2000,
    )


@pytest.fixture
def deepseek(chat_group, monkeypatch):
    """`alpha-deepseek`, served by a Chat Completions server (`openai-compatible`)."""
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    compatible = upstream_make(
        name="deepseek", base_url=OPENAI_BASE, api_key_env=KEY_ENV, kind="openai-compatible"
    )
    return text_model_make(
        model_id="alpha-deepseek",
        group=chat_group,
        upstreams=[compatible],
        upstream_model="deepseek-chat",
        cached_input_price="0.50",
        max_output_tokens=1000,
    )


def responses_post(client, body, key):
    return client.post(
        "/v1/responses",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.fixture
def tara(chat_group):
    """An account of the chat group with ¥1."""
    account = account_create(username="tara", email="tara@example.com", password="tara-password-1")
    account_set_groups(account=account, allowed_groups=[chat_group], current_group=chat_group)
    wallet_top_up(account=account, amount="1.00", reference="fixture")
    return account


@pytest.fixture
def tara_key(tara, chat_group):
    _, secret = api_key_create(account=tara, group=chat_group, label="agent")
    return secret


@pytest.fixture
def upstream():
    """The upstreams' HTTP boundary: every call the gateway makes to a provider goes through here."""
    with responses_lib.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def sent_json(call) -> dict:
    return json.loads(call.request.body)


def messages_events(
    *, message: dict[str, Any], tool_use: dict[str, Any], arguments: str, stop_reason: str, output_tokens: int
) -> list[tuple[str, dict[str, Any]]]:
    """An Anthropic Messages stream as (event name, data) pairs, as the API orders them: the message's
    start (`message`), a ping, a text block of "Hi", the `tool_use` block with its `arguments` in one
    piece, the stop reason with the output usage, the stop."""
    return [
        ("message_start", {"type": "message_start", "message": message}),
        ("ping", {"type": "ping"}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": tool_use}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": arguments},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def sse_body(*events: tuple[str, Any]) -> str:
    """An event stream: (event name or "", data object or raw text) per event."""
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out)


def assert_in_family_shape(response, shape: str) -> None:
    """An error in the endpoint's error shape, or an event stream, or a JSON object; no hold open."""
    if response.status_code >= 400:
        payload = response.json()
        if shape == "native":
            assert payload["type"] == "error"
        error = payload["error"]
        assert isinstance(error["type"], str) and error["type"]
        assert isinstance(error["message"], str) and error["message"]
    elif response.streaming:
        stream = b"".join(response.streaming_content)
        assert stream.startswith(b"data: ") or stream.startswith(b"event: "), stream[:200]
    else:
        assert isinstance(response.json(), dict)
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
