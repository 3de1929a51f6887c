"""The second step of a tool loop, recorded from real clients (tests/clients/corpus), on models that sign
their reasoning and check the signature when a history comes back: through a translator the history
cannot carry it, so the gateway must send what the provider accepts instead.

The providers behind `responses` answer as their documentation says they do:
- Gemini 3 refuses a history whose function calls lack their thought signature, 400 INVALID_ARGUMENT
  "Function call is missing a thought_signature" (ai.google.dev, "Thought signatures"); it accepts the
  placeholder Google documents for calls it did not make;
- Anthropic refuses `thinking` when the last assistant turn called a tool without starting with its
  signed thinking block, 400 invalid_request_error (docs.claude.com, "Extended thinking": "a final
  assistant message must start with a thinking block").
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import responses as responses_lib

from billing.ledger import wallet_top_up
from billing.models import Hold, UsageRecord
from billing.selectors import ledger_check
from tests.chat.conftest import ANTHROPIC_BASE, KEY_ENV, PROVIDER_KEY
from tests.clients.conftest import corpus_body, corpus_index
from tests.factories import text_model_make, upstream_make

pytestmark = pytest.mark.django_db

GEMINI_BASE = "https://generativelanguage.test/v1beta"
GEMINI_MODEL = "gemini-3-flash-preview"
PLACEHOLDERS = {b"skip_thought_signature_validator", b"context_engineering_is_the_way_to_go"}
GEMINI_ANSWER = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "It is 12C."}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 5},
}
CLAUDE_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "It is 12C."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 40, "output_tokens": 5},
}


def _has_tool_history(body: dict[str, Any]) -> bool:
    items = body.get("messages") or body.get("input") or []
    for item in items if isinstance(items, list) else []:
        content = item.get("content")
        if item.get("tool_calls") or item.get("type") == "function_call":
            return True
        if isinstance(content, list) and any(block.get("type") == "tool_use" for block in content):
            return True
    return False


SECOND_STEPS = [
    entry
    for entry in corpus_index()
    if not entry["endpoint"].endswith("/count_tokens") and _has_tool_history(corpus_body(entry))
]


def gemini_checks_signatures(request) -> tuple[int, dict, str]:
    """Gemini 3: each model turn's first function call must carry a signature it can check."""
    body = json.loads(request.body)
    for position, content in enumerate(body["contents"]):
        calls = [part for part in content["parts"] if "functionCall" in part]
        if content["role"] != "model" or not calls:
            continue
        signature = calls[0].get("thoughtSignature")
        if signature is None or base64.b64decode(signature) not in PLACEHOLDERS:
            error = {
                "code": 400,
                "message": (
                    "Function call is missing a thought_signature in functionCall parts. This is required "
                    "for tools to work correctly, and missing thought_signature may lead to degraded model "
                    "performance. Additional data, function call "
                    f"`default_api:{calls[0]['functionCall']['name']}`, position {position + 1}."
                ),
                "status": "INVALID_ARGUMENT",
            }
            return 400, {}, json.dumps({"error": error})
    return 200, {}, json.dumps(GEMINI_ANSWER)


def anthropic_checks_thinking(request) -> tuple[int, dict, str]:
    """Anthropic: with thinking on, a last assistant turn that called a tool starts with its thinking."""
    body = json.loads(request.body)
    if body.get("thinking", {}).get("type") == "enabled":
        last = [turn for turn in body["messages"] if turn["role"] == "assistant"][-1:]
        blocks = last[0]["content"] if last else []
        if any(block["type"] == "tool_use" for block in blocks) and blocks[0]["type"] not in (
            "thinking",
            "redacted_thinking",
        ):
            message = (
                f"messages.{body['messages'].index(last[0])}.content.0.type: Expected `thinking` or "
                f"`redacted_thinking`, but found `{blocks[0]['type']}`. When `thinking` is enabled, a final "
                "`assistant` message must start with a thinking block (preceeding the lastmost set of "
                "`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
                "previous turns. To avoid this requirement, disable `thinking`."
            )
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
            return 400, {}, json.dumps(error)
    return 200, {}, json.dumps(CLAUDE_ANSWER)


@pytest.fixture
def signing_models(chat_group, tara, monkeypatch):
    """A Gemini 3 model and a Claude model; tara with enough for a long recorded history."""
    wallet_top_up(account=tara, amount="100.00", reference="tool loops")
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    gemini = upstream_make(name="gemini", base_url=GEMINI_BASE, api_key_env=KEY_ENV, kind="gemini")
    text_model_make(
        model_id="alpha-gemini-3",
        group=chat_group,
        upstreams=[gemini],
        upstream_model=GEMINI_MODEL,
        max_output_tokens=32000,
    )
    anthropic = upstream_make(
        name="anthropic", base_url=ANTHROPIC_BASE, api_key_env=KEY_ENV, kind="anthropic"
    )
    text_model_make(
        model_id="alpha-claude-thinking",
        group=chat_group,
        upstreams=[anthropic],
        upstream_model="claude-sonnet-4-5",
        max_output_tokens=32000,
    )


def post(client, path: str, body: dict[str, Any], key: str):
    return client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def assert_answered_and_charged_once(response) -> None:
    assert response.status_code == 200, response.content[:1000]
    record = UsageRecord.objects.get()
    assert (record.status, record.amount > 0) == (200, True)
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert ledger_check() == []


@pytest.mark.parametrize("entry", SECOND_STEPS, ids=lambda entry: entry["file"].removesuffix(".json"))
def test_a_recorded_tool_loop_goes_on_on_a_gemini_model_that_checks_thought_signatures(
    client, upstream, signing_models, tara, tara_key, entry
):
    upstream.add_callback(
        responses_lib.POST,
        f"{GEMINI_BASE}/models/{GEMINI_MODEL}:generateContent",
        callback=gemini_checks_signatures,
    )
    body = {**corpus_body(entry), "model": "alpha-gemini-3", "stream": False}
    body.pop("stream_options", None)
    if (
        entry["endpoint"] == "/v1/responses"
    ):  # Codex's web search and sub-agent tools off, as docs/text.md says
        body["tools"] = [tool for tool in body.get("tools", []) if tool.get("type") == "function"]

    response = post(client, entry["endpoint"], body, tara_key)

    assert_answered_and_charged_once(response)
    sent = json.loads(upstream.calls[0].request.body)
    assert any("functionCall" in part for content in sent["contents"] for part in content["parts"])


@pytest.mark.parametrize(
    "entry",
    [entry for entry in SECOND_STEPS if entry["endpoint"] == "/v1/chat/completions"],
    ids=lambda entry: entry["file"].removesuffix(".json"),
)
def test_a_recorded_chat_tool_loop_with_reasoning_goes_on_on_a_claude_model(
    client, upstream, signing_models, tara, tara_key, entry
):
    """The second step of a Chat Completions tool loop that asked for reasoning (what LangChain's
    ChatOpenAI or the OpenAI Agents SDK send with a reasoning effort) is served without thinking."""
    upstream.add_callback(
        responses_lib.POST, f"{ANTHROPIC_BASE}/messages", callback=anthropic_checks_thinking
    )
    body = {
        **corpus_body(entry),
        "model": "alpha-claude-thinking",
        "stream": False,
        "reasoning_effort": "low",
    }
    body.pop("stream_options", None)
    body["max_completion_tokens"] = 4000

    response = post(client, entry["endpoint"], body, tara_key)

    assert_answered_and_charged_once(response)
    assert "thinking" not in json.loads(upstream.calls[0].request.body)


def test_the_first_step_of_a_tool_loop_on_a_claude_model_still_thinks(
    client, upstream, signing_models, tara, tara_key
):
    upstream.add_callback(
        responses_lib.POST, f"{ANTHROPIC_BASE}/messages", callback=anthropic_checks_thinking
    )
    first = next(e for e in corpus_index() if e["file"] == "openai-agents--chat--1-chat.json")
    body = {
        **corpus_body(first),
        "model": "alpha-claude-thinking",
        "stream": False,
        "reasoning_effort": "low",
    }
    body["max_completion_tokens"] = 4000

    response = post(client, first["endpoint"], body, tara_key)

    assert_answered_and_charged_once(response)
    assert json.loads(upstream.calls[0].request.body)["thinking"] == {
        "type": "enabled",
        "budget_tokens": 1024,
    }
