"""Every request body recorded from a real client (tests/clients/corpus: Claude Code, Codex CLI, the
openai and anthropic SDKs, LangChain, the OpenAI Agents SDK, the Vercel AI SDK) is served by the
gateway on the demo upstream, streamed and not: 200, an answer the family's SDK parses, and exactly
one charge (one captured hold, one ledger entry, one usage record) for the call; count_tokens is
answered free.

Only `model` (made the demo model of the body's family) and `stream` are changed: tools, system
prompts, thinking settings, cache_control and metadata go as the client sent them.
"""

from __future__ import annotations

import json
import re
import uuid
from decimal import Decimal

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.clients.conftest import DEMO_MODEL, FAMILY, corpus_body, corpus_index

pytestmark = pytest.mark.django_db

DEMO_BALANCE = Decimal("10.00")  # config/demo.toml
OPERATION = {  # a usage record's endpoint: the operation
    "/v1/chat/completions": "chat.completions",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/messages/count_tokens": "messages.count_tokens",
}


def _cases():
    for entry in corpus_index():
        name = entry["file"].removesuffix(".json")
        yield pytest.param(entry, False, id=f"{name}-json")
        if not entry["endpoint"].endswith("/count_tokens"):
            # Closing a streamed answer ends the request and closes its connection: the test's own
            # transaction cannot be that connection's.
            yield pytest.param(
                entry, True, id=f"{name}-stream", marks=pytest.mark.django_db(transaction=True)
            )


def _request_body(entry: dict, *, stream: bool) -> dict:
    body = corpus_body(entry)
    body["model"] = DEMO_MODEL[FAMILY[entry["endpoint"]]]
    if entry["endpoint"].endswith("/count_tokens"):
        return body
    body["stream"] = stream
    if not stream:
        body.pop("stream_options", None)  # only allowed with a stream
    return body


def _events(response) -> list[tuple[str, str]]:
    """(event name, data) of each event of a streamed answer."""
    text = b"".join(response.streaming_content).decode()
    response.close()
    events = []
    for block in text.split("\n\n"):
        name, data = "", []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, "\n".join(data)))
    return events


def _tokens_of_json(endpoint: str, answer: dict) -> tuple[int, int]:
    """(input, output) tokens the answer reports, after checking that its SDK parses it."""
    if endpoint == "/v1/chat/completions":
        completion = ChatCompletion.model_validate(answer)
        message = completion.choices[0].message
        assert message.content or message.tool_calls
        return completion.usage.prompt_tokens, completion.usage.completion_tokens
    if endpoint == "/v1/responses":
        response = Response.model_validate(answer)
        assert response.status == "completed" and response.output
        return response.usage.input_tokens, response.usage.output_tokens
    message = Message.model_validate(answer)
    assert message.content and message.stop_reason
    return message.usage.input_tokens, message.usage.output_tokens


def _tokens_of_stream(endpoint: str, events: list[tuple[str, str]]) -> tuple[int, int]:
    if endpoint == "/v1/chat/completions":
        assert events[-1][1] == "[DONE]"
        chunks = [ChatCompletionChunk.model_validate_json(data) for _, data in events[:-1]]
        assert any(c.choices and c.choices[0].finish_reason for c in chunks)
        usage = next((c.usage for c in chunks if c.usage), None)
        # The caller who did not ask for usage (stream_options) does not get it.
        return (usage.prompt_tokens, usage.completion_tokens) if usage else (None, None)
    if endpoint == "/v1/responses":
        name, data = events[-1]
        assert name == "response.completed"
        response = Response.model_validate(json.loads(data)["response"])
        assert response.output
        return response.usage.input_tokens, response.usage.output_tokens
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "content_block_delta" in names
    start = Message.model_validate(json.loads(events[0][1])["message"])
    delta = json.loads([data for name, data in events if name == "message_delta"][-1])
    return start.usage.input_tokens, delta["usage"]["output_tokens"]


@pytest.mark.parametrize(("entry", "stream"), list(_cases()))
def test_a_recorded_client_body_is_answered_and_charged_once(client, demo, entry, stream):
    endpoint = entry["endpoint"]
    request_id = f"replay-{uuid.uuid4().hex}"

    response = client.post(
        endpoint,
        data=json.dumps(_request_body(entry, stream=stream)),
        content_type="application/json",
        headers={"authorization": f"Bearer {demo.key}", "x-request-id": request_id},
    )

    if stream:
        assert response.status_code == 200, response.content[:2000]  # an error is plain JSON
        assert response["Content-Type"].startswith("text/event-stream")
        input_tokens, output_tokens = _tokens_of_stream(endpoint, _events(response))
    else:
        assert response.status_code == 200, response.content[:2000]
        answer = response.json()
        if endpoint.endswith("/count_tokens"):
            assert answer["input_tokens"] > 0
            input_tokens, output_tokens = answer["input_tokens"], None
        else:
            input_tokens, output_tokens = _tokens_of_json(endpoint, answer)

    record = UsageRecord.objects.get(request_id=request_id)
    assert (record.endpoint, record.status, record.model_id) == (
        OPERATION[endpoint],
        200,
        DEMO_MODEL[FAMILY[endpoint]],
    )
    charges = list(LedgerEntry.objects.filter(reference=request_id))
    holds = list(Hold.objects.filter(reference=request_id))
    if endpoint.endswith("/count_tokens"):
        assert record.amount == 0 and charges == [] and holds == []
    else:
        assert record.input_tokens > 0 and record.output_tokens > 0 and record.amount > 0
        if input_tokens is not None:
            assert (record.input_tokens, record.output_tokens) == (input_tokens, output_tokens)
        assert [(c.kind, c.amount) for c in charges] == [(LedgerEntry.Kind.CHARGE, -record.amount)]
        assert [(h.status, h.captured_amount) for h in holds] == [(Hold.Status.CAPTURED, record.amount)]
    wallet = Wallet.objects.get(account=demo.account)
    assert (wallet.balance, wallet.held) == (DEMO_BALANCE - record.amount, 0)
    assert UsageRecord.objects.count() == 1
    assert ledger_check() == []


def test_the_corpus_holds_every_client_on_its_endpoints():
    """The recording covers what the issue names: the agent CLIs, both SDKs, LangChain on both
    families, the Agents SDK and the AI SDK on its three APIs, with tool results sent back and
    count_tokens; no machine path (a file under /tmp) or key was recorded."""
    index = corpus_index()
    seen = {(e["client"], e["endpoint"]) for e in index}
    assert {
        ("claude-code", "/v1/messages"),
        ("codex", "/v1/responses"),
        ("qwen-code", "/v1/chat/completions"),
        ("opencode", "/v1/chat/completions"),
        ("openai", "/v1/chat/completions"),
        ("openai", "/v1/responses"),
        ("anthropic", "/v1/messages"),
        ("anthropic", "/v1/messages/count_tokens"),
        ("langchain-openai", "/v1/chat/completions"),
        ("langchain-openai", "/v1/responses"),
        ("langchain-anthropic", "/v1/messages"),
        ("openai-agents", "/v1/responses"),
        ("openai-agents", "/v1/chat/completions"),
        ("ai-sdk", "/v1/responses"),
        ("ai-sdk", "/v1/chat/completions"),
        ("ai-sdk", "/v1/messages"),
    } <= seen
    bodies = [json.dumps(corpus_body(e)) for e in index]
    assert any('"tool_result"' in b for b in bodies)  # Anthropic-style tool results
    assert any('"function_call_output"' in b for b in bodies)  # Responses tool results
    assert any('"role": "tool"' in b for b in bodies)  # chat tool results
    assert all("sk-recording-key" not in b and not re.search(r"/tmp/[\w.-]", b) for b in bodies)
