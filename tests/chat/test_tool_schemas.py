"""Tools whose JSON schema has a parameter named `type` (Codex CLI's own tools do): the request
walkers read `type` as a content part's kind only when it is a string, so every text family serves
the call and bills it."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.models import Wallet
from tests.factories import text_model_make

pytestmark = pytest.mark.django_db

SCHEMA_WITH_TYPE_PARAMETER = {
    "type": "object",
    "properties": {"type": {"type": "string"}, "image": {"type": "object", "properties": {"type": {}}}},
}


@pytest.fixture
def demo_chat(chat_group, demo_upstream):
    return text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])


BODIES = {
    "/v1/chat/completions": {
        "model": "demo-chat",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA_WITH_TYPE_PARAMETER}}],
    },
    "/v1/responses": {
        "model": "demo-chat",
        "input": "hi",
        "tools": [{"type": "function", "name": "f", "parameters": SCHEMA_WITH_TYPE_PARAMETER}],
    },
    "/v1/messages": {
        "model": "demo-chat",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "f", "input_schema": SCHEMA_WITH_TYPE_PARAMETER}],
    },
    "/v1/messages/count_tokens": {
        "model": "demo-chat",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "f", "input_schema": SCHEMA_WITH_TYPE_PARAMETER}],
    },
}


@pytest.mark.parametrize("path", list(BODIES))
def test_a_tool_parameter_named_type_is_served_on_every_endpoint(client, demo_chat, tara, tara_key, path):
    response = client.post(
        path, data=json.dumps(BODIES[path]), content_type="application/json", headers={"x-api-key": tara_key}
    )

    assert response.status_code == 200, response.content
    balance = Wallet.objects.get(account=tara).balance
    if path.endswith("count_tokens"):
        assert response.json()["input_tokens"] > 0
        assert balance == Decimal("1.00")
    else:
        assert balance < Decimal("1.00")
