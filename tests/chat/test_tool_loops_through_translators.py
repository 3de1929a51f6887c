"""The second step of a tool loop, recorded from real clients (tests/clients/corpus), through the
translators to providers that check what a history carries: what a Chat Completions history cannot
carry (a signature), or carries where the provider does not take it (a tool's image), must be sent as
the provider accepts it.

The providers behind `responses` answer as their documentation says they do:
- Gemini 3 refuses a history whose function calls lack their thought signature, 400 INVALID_ARGUMENT
  "Function call is missing a thought_signature" (ai.google.dev, "Thought signatures"); it accepts the
  placeholder Google documents for calls it did not make;
- Anthropic refuses `thinking` when the last assistant turn called a tool without starting with its
  signed thinking block, 400 invalid_request_error (docs.claude.com, "Extended thinking": "a final
  assistant message must start with a thinking block"), and, from Claude 4.5, `temperature` with
  `top_p`;
- OpenAI's Chat Completions refuses an image in a tool message, 400 invalid_value ("Image URLs are
  only allowed for messages with role 'user'"), tool messages that do not answer every call right
  after it, a `user` longer than 64 characters (string_above_max_length), and, on a model that
  reasons, a `temperature` or `top_p` other than 1 (unsupported_value).
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
from tests.chat.conftest import ANTHROPIC_BASE, KEY_ENV, OPENAI_BASE, PROVIDER_KEY
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
CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "gpt-5.1",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "It is 12C."}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45},
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


def anthropic_checks(request) -> tuple[int, dict, str]:
    """Anthropic (Claude 4.5 and later): not both `temperature` and `top_p`; with thinking on, a last
    assistant turn that called a tool starts with its thinking."""
    body = json.loads(request.body)
    if "temperature" in body and "top_p" in body:
        message = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return 400, {}, json.dumps(error)
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


def openai_checks(request) -> tuple[int, dict, str]:
    """Chat Completions: no `reasoning_effort` for a GPT-4 model, and no sampling setting but the
    default for one that reasons; a `user` of at most 64 characters; tool messages answer each call
    right after it, and hold no image."""
    body = json.loads(request.body)
    if "reasoning_effort" in body and body["model"].startswith("gpt-4"):
        error = {
            "message": "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
            "type": "invalid_request_error",
            "param": "reasoning_effort",
            "code": "unsupported_parameter",
        }
        return 400, {}, json.dumps({"error": error})
    for name in ("temperature", "top_p"):
        if body.get(name, 1) != 1 and not body["model"].startswith("gpt-4"):
            error = {
                "message": (
                    f"Unsupported value: '{name}' does not support {body[name]} with this model. Only "
                    "the default (1) value is supported."
                ),
                "type": "invalid_request_error",
                "param": name,
                "code": "unsupported_value",
            }
            return 400, {}, json.dumps({"error": error})
    user = body.get("user")
    if isinstance(user, str) and len(user) > 64:
        error = {
            "message": (
                "Invalid 'user': string too long. Expected a string with maximum length 64, but got a "
                f"string with length {len(user)} instead."
            ),
            "type": "invalid_request_error",
            "param": "user",
            "code": "string_above_max_length",
        }
        return 400, {}, json.dumps({"error": error})
    messages = body["messages"]
    for position, message in enumerate(messages):
        content = message.get("content")
        if (
            message["role"] == "tool"
            and isinstance(content, list)
            and any(part.get("type") == "image_url" for part in content)
        ):
            error = {
                "message": (
                    f"Invalid 'messages[{position}]'. Image URLs are only allowed for messages with role "
                    "'user', but this message with role 'tool' contains an image URL."
                ),
                "type": "invalid_request_error",
                "param": f"messages[{position}]",
                "code": "invalid_value",
            }
            return 400, {}, json.dumps({"error": error})
        if message.get("tool_calls"):
            following = []
            for after in messages[position + 1 :]:
                if after["role"] != "tool":
                    break
                following.append(after["tool_call_id"])
            missing = [call["id"] for call in message["tool_calls"] if call["id"] not in following]
            if missing:
                error = {
                    "message": (
                        "An assistant message with 'tool_calls' must be followed by tool messages "
                        "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                        f"response messages: {', '.join(missing)}"
                    ),
                    "type": "invalid_request_error",
                    "param": f"messages.[{position + 1}].role",
                    "code": None,
                }
                return 400, {}, json.dumps({"error": error})
    return 200, {}, json.dumps(CHAT_ANSWER)


@pytest.fixture
def translated_models(chat_group, tara, monkeypatch):
    """A Gemini 3 model, a Claude model, an OpenAI model and a Chat Completions server's model; tara
    with enough for a long recorded history."""
    wallet_top_up(account=tara, amount="100.00", reference="tool loops")
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    models = [  # model id, upstream kind, upstream base URL, upstream model
        ("alpha-gemini-3", "gemini", GEMINI_BASE, GEMINI_MODEL),
        ("alpha-claude-thinking", "anthropic", ANTHROPIC_BASE, "claude-sonnet-4-5"),
        ("alpha-gpt", "openai", OPENAI_BASE, "gpt-5.1"),
        ("alpha-gpt-4o", "openai", OPENAI_BASE, "gpt-4o"),
        ("alpha-compatible", "openai-compatible", OPENAI_BASE, "gpt-5.1"),
    ]
    for model_id, kind, base_url, upstream_model in models:
        server = upstream_make(name=kind, base_url=base_url, api_key_env=KEY_ENV, kind=kind)
        text_model_make(
            model_id=model_id,
            group=chat_group,
            upstreams=[server],
            upstream_model=upstream_model,
            max_output_tokens=64000,  # the AI SDK asks for a Sonnet 4.5's 64,000
        )


def post(client, path: str, body: dict[str, Any], key: str):
    return client.post(
        path,
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


def parts_sent(upstream, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """The content parts of type `kind` in the Chat Completions call sent upstream, with their role."""
    messages = json.loads(upstream.calls[0].request.body)["messages"]
    return [
        (message["role"], part)
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == kind
    ]


def assert_answered_and_charged_once(response) -> None:
    assert response.status_code == 200, response.content[:1000]
    record = UsageRecord.objects.get()
    assert (record.status, record.amount > 0) == (200, True)
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert ledger_check() == []


@pytest.mark.parametrize("entry", SECOND_STEPS, ids=lambda entry: entry["file"].removesuffix(".json"))
def test_a_recorded_tool_loop_goes_on_on_a_gemini_model_that_checks_thought_signatures(
    client, upstream, translated_models, tara, tara_key, entry
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
    client, upstream, translated_models, tara, tara_key, entry
):
    """The second step of a Chat Completions tool loop that asked for reasoning (what LangChain's
    ChatOpenAI or the OpenAI Agents SDK send with a reasoning effort) is served without thinking."""
    upstream.add_callback(responses_lib.POST, f"{ANTHROPIC_BASE}/messages", callback=anthropic_checks)
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
    client, upstream, translated_models, tara, tara_key
):
    upstream.add_callback(responses_lib.POST, f"{ANTHROPIC_BASE}/messages", callback=anthropic_checks)
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


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="


def claude_code_read(*blocks: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's recorded second step, its Read tool having answered `blocks`."""
    body = corpus_body({"file": "claude-code--tool--2-messages.json"})
    body["messages"][-1]["content"][0]["content"] = list(blocks)
    return body


def claude_code_read_an_image() -> dict[str, Any]:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    return claude_code_read({"type": "text", "text": "shot.png"}, image)


def codex_viewed_an_image() -> dict[str, Any]:
    """Codex's recorded second step, the call answered as its view_image tool answers."""
    body = corpus_body({"file": "codex--tool--2-responses.json"})
    output = next(item for item in body["input"] if item.get("type") == "function_call_output")
    output["output"] = [{"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]
    body["tools"] = [tool for tool in body["tools"] if tool.get("type") == "function"]
    return body


@pytest.mark.parametrize(
    ("path", "body", "model"),
    [
        ("/v1/messages", claude_code_read_an_image, "alpha-gpt"),
        ("/v1/messages", claude_code_read_an_image, "alpha-compatible"),
        ("/v1/responses", codex_viewed_an_image, "alpha-compatible"),
    ],
    ids=["claude-code-on-openai", "claude-code-on-a-compatible-server", "codex-on-a-compatible-server"],
)
def test_an_image_a_tool_returned_reaches_a_chat_completions_model_in_a_user_message(
    client, upstream, translated_models, tara, tara_key, path, body, model
):
    upstream.add_callback(responses_lib.POST, f"{OPENAI_BASE}/chat/completions", callback=openai_checks)

    response = post(client, path, {**body(), "model": model, "stream": False}, tara_key)

    assert_answered_and_charged_once(response)
    images = [(role, part["image_url"]["url"]) for role, part in parts_sent(upstream, "image_url")]
    assert images == [("user", f"data:image/png;base64,{PNG}")]


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/messages", claude_code_read_an_image), ("/v1/responses", codex_viewed_an_image)],
    ids=["claude-code", "codex"],
)
def test_an_image_a_tool_returned_reaches_a_gemini_model(
    client, upstream, translated_models, tara, tara_key, path, body
):
    upstream.add_callback(
        responses_lib.POST,
        f"{GEMINI_BASE}/models/{GEMINI_MODEL}:generateContent",
        callback=gemini_checks_signatures,
    )

    response = post(client, path, {**body(), "model": "alpha-gemini-3", "stream": False}, tara_key)

    assert_answered_and_charged_once(response)
    contents = json.loads(upstream.calls[0].request.body)["contents"]
    assert {"inlineData": {"mimeType": "image/png", "data": PNG}} in contents[-1]["parts"]
    assert contents[-1]["role"] == "user"


@pytest.mark.parametrize("model", ["alpha-gpt", "alpha-gpt-4o"])
@pytest.mark.parametrize(
    "entry",
    [entry for entry in corpus_index() if entry["endpoint"] == "/v1/messages"],
    ids=lambda entry: entry["file"].removesuffix(".json"),
)
def test_every_recorded_messages_body_is_taken_by_an_openai_model(
    client, upstream, translated_models, tara, tara_key, entry, model
):
    """Claude Code's `metadata.user_id` is a JSON object of about 150 characters, and it asks every
    model for thinking: sent as they were, OpenAI refused every call (the user id), and a GPT-4
    model every call of Claude Code and of the anthropic SDK's thinking example (the effort)."""
    upstream.add_callback(responses_lib.POST, f"{OPENAI_BASE}/chat/completions", callback=openai_checks)
    body = {**corpus_body(entry), "model": model, "stream": False}

    response = post(client, entry["endpoint"], body, tara_key)

    assert_answered_and_charged_once(response)
    user = json.loads(upstream.calls[0].request.body).get("user")
    assert user is None or len(user) <= 64


@pytest.mark.parametrize(
    ("model", "sampling_sent"), [("alpha-gpt", {}), ("alpha-gpt-4o", {"temperature": 0, "top_p": 0.9})]
)
def test_an_anthropic_callers_temperature_reaches_only_an_openai_model_that_takes_it(
    client, upstream, translated_models, tara, tara_key, model, sampling_sent
):
    """Anthropic takes a temperature on every model; OpenAI's models that reason refuse all but 1, so
    an Anthropic caller's `temperature: 0` (LangChain's ChatAnthropic(temperature=0)) refused every
    call on a GPT-5 model."""
    upstream.add_callback(responses_lib.POST, f"{OPENAI_BASE}/chat/completions", callback=openai_checks)
    entry = next(entry for entry in corpus_index() if entry["file"].startswith("langchain-anthropic--"))
    body = {**corpus_body(entry), "model": model, "stream": False, "temperature": 0, "top_p": 0.9}

    response = post(client, "/v1/messages", body, tara_key)

    assert_answered_and_charged_once(response)
    sent = json.loads(upstream.calls[0].request.body)
    assert {name: sent[name] for name in ("temperature", "top_p") if name in sent} == sampling_sent


def test_a_chat_call_with_temperature_and_top_p_is_taken_by_a_claude_model(
    client, upstream, translated_models, tara, tara_key
):
    upstream.add_callback(responses_lib.POST, f"{ANTHROPIC_BASE}/messages", callback=anthropic_checks)
    body = {
        "model": "alpha-claude-thinking",
        "messages": [{"role": "user", "content": "Summarise."}],
        "temperature": 0.2,
        "top_p": 0.9,
    }

    response = post(client, "/v1/chat/completions", body, tara_key)

    assert_answered_and_charged_once(response)
    sent = json.loads(upstream.calls[0].request.body)
    assert (sent["temperature"], "top_p" in sent) == (0.2, False)


DEEPSEEK_BASE = "https://api.deepseek.test/v1"
DEEPSEEK_CALL = {
    "id": "chatcmpl-ds",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "deepseek-v4-pro",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "",
                "reasoning_content": "The user wants the weather; I should call get_weather.",
                "tool_calls": [
                    {
                        "id": "call_ds1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
}
WEATHER_TOOL = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
WEATHER_FUNCTION = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL["input_schema"]}


def deepseek_checks_reasoning(request) -> tuple[int, dict, str]:
    """DeepSeek's thinking mode: an assistant message that called a tool carries its reasoning back."""
    messages = json.loads(request.body)["messages"]
    for position, message in enumerate(messages):
        if (
            message["role"] == "assistant"
            and message.get("tool_calls")
            and "reasoning_content" not in message
        ):
            error = {
                "message": (
                    f"Missing reasoning_content field in the assistant message at message index {position}. "
                    "For more information, please refer to "
                    "https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
                ),
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
            return 400, {}, json.dumps({"error": error})
    called = any(message["role"] == "assistant" for message in messages)
    return 200, {}, json.dumps(CHAT_ANSWER if called else DEEPSEEK_CALL)


@pytest.fixture
def deepseek(chat_group, translated_models, upstream):
    server = upstream_make(
        name="deepseek", base_url=DEEPSEEK_BASE, api_key_env=KEY_ENV, kind="openai-compatible"
    )
    text_model_make(
        model_id="alpha-deepseek", group=chat_group, upstreams=[server], upstream_model="deepseek-v4-pro"
    )
    upstream.add_callback(
        responses_lib.POST, f"{DEEPSEEK_BASE}/chat/completions", callback=deepseek_checks_reasoning
    )


def test_an_anthropic_callers_tool_loop_goes_on_on_a_reasoning_deepseek_model(client, deepseek, tara_key):
    """As the anthropic SDK's tool loop does: the answer's content appended whole, then the result."""
    body = {
        "model": "alpha-deepseek",
        "max_tokens": 1000,
        "tools": [WEATHER_TOOL],
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
    }
    first = post(client, "/v1/messages", body, tara_key)
    assert first.status_code == 200, first.content
    content = first.json()["content"]
    assert [block["type"] for block in content] == ["thinking", "tool_use"]

    body["messages"] += [
        {"role": "assistant", "content": content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": content[1]["id"], "content": "12C"}],
        },
    ]
    second = post(client, "/v1/messages", body, tara_key)

    assert second.status_code == 200, second.content
    assert second.json()["content"] == [{"type": "text", "text": "It is 12C."}]


def test_a_responses_callers_tool_loop_goes_on_on_a_reasoning_deepseek_model(client, deepseek, tara_key):
    """As Codex does with `store: false`: the answer's output items appended whole, then the output."""
    body = {
        "model": "alpha-deepseek",
        "store": False,
        "tools": [WEATHER_FUNCTION],
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]}],
    }
    first = post(client, "/v1/responses", body, tara_key)
    assert first.status_code == 200, first.content
    output = first.json()["output"]
    assert [item["type"] for item in output] == ["reasoning", "function_call"]

    body["input"] += [
        *output,
        {"type": "function_call_output", "call_id": output[1]["call_id"], "output": "12C"},
    ]
    second = post(client, "/v1/responses", body, tara_key)

    assert second.status_code == 200, second.content
    assert second.json()["output"][-1]["content"][0]["text"] == "It is 12C."


PDF = "JVBERi0xLjQKJcOkw7zDtsOfCg=="


def claude_code_read_a_pdf() -> dict[str, Any]:
    """What Claude Code 2.1.332's Read answers for a PDF: a line and the document."""
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
    }
    return claude_code_read({"type": "text", "text": "PDF file read: spec.pdf (20 B)"}, document)


@pytest.mark.parametrize(
    ("model", "sent_where"),
    [("alpha-gpt", "user"), ("alpha-compatible", None)],
    ids=["openai-reads-it", "a-compatible-server-is-told-it-cannot"],
)
def test_claude_codes_session_goes_on_after_it_reads_a_pdf_on_a_chat_completions_model(
    client, upstream, translated_models, tara, tara_key, model, sent_where
):
    """The tool's result stays in Claude Code's history: a refusal would refuse every later call."""
    upstream.add_callback(responses_lib.POST, f"{OPENAI_BASE}/chat/completions", callback=openai_checks)

    response = post(
        client, "/v1/messages", {**claude_code_read_a_pdf(), "model": model, "stream": False}, tara_key
    )

    assert_answered_and_charged_once(response)
    files = [(role, part["file"]["file_data"]) for role, part in parts_sent(upstream, "file")]
    assert files == ([(sent_where, f"data:application/pdf;base64,{PDF}")] if sent_where else [])


def test_claude_codes_pdf_reaches_a_gemini_model(client, upstream, translated_models, tara, tara_key):
    upstream.add_callback(
        responses_lib.POST,
        f"{GEMINI_BASE}/models/{GEMINI_MODEL}:generateContent",
        callback=gemini_checks_signatures,
    )

    response = post(
        client,
        "/v1/messages",
        {**claude_code_read_a_pdf(), "model": "alpha-gemini-3", "stream": False},
        tara_key,
    )

    assert_answered_and_charged_once(response)
    contents = json.loads(upstream.calls[0].request.body)["contents"]
    assert {"inlineData": {"mimeType": "application/pdf", "data": PDF}} in contents[-1]["parts"]
