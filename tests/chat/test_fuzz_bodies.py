"""Any JSON value in any position of a text body: never a 5xx, a refusal in the family's own error
shape, and no money lost (no hold left open, the ledger's invariants kept).

Hypothesis puts arbitrary JSON (objects with the keys the walkers look at, strings with NULs and
unpaired surrogates, huge numbers) into each field the gateway or the demo upstream reads, and into
a message's content parts, on every text endpoint, streamed and not; and in place of any value at
any depth of a body a real client sent (tests/clients/corpus): its tools' schemas, its history's
parts, whatever that client puts where.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.ledger import wallet_top_up
from billing.selectors import ledger_check
from tests.chat.conftest import assert_in_family_shape
from tests.clients.conftest import corpus_body, corpus_index
from tests.factories import text_model_make
from tests.fuzz_values import fuzz_settings, json_values, texts

pytestmark = pytest.mark.django_db

# Keys and strings the request walkers give a meaning to, so that the fuzz reaches their branches.
MEANINGFUL = [
    "type", "role", "content", "text", "image", "image_url", "input_image", "file", "document",
    "input_file", "file_data", "data", "source", "tool_result", "tool_use", "function", "name",
    "parameters", "input_schema", "properties", "required", "json_schema", "json_object", "schema",
    "format", "object", "string", "user", "assistant", "tool", "system", "developer", "any", "auto",
    "none", "function_call_output", "minItems", "include_usage", "$schema", "item_reference", "id",
    "previous_response_id", "store",
]  # fmt: skip
TEXTS = texts(MEANINGFUL)
JSON_VALUES = json_values(TEXTS, max_leaves=16)

USER = {"role": "user", "content": "hi"}
FAMILIES: dict[str, tuple[dict[str, Any], str, list[tuple[Any, ...]]]] = {
    # path: (a valid body, the error shape, where the fuzz puts its value)
    "/v1/chat/completions": (
        {"model": "demo-chat", "messages": [USER]},
        "compatible",
        [
            ("messages",), ("messages", 0), ("messages", 0, "content"), ("messages", 0, "content", 0),
            ("tools",), ("tools", 0), ("tool_choice",), ("metadata",), ("response_format",), ("stop",),
            ("n",), ("stream_options",), ("user",), ("max_tokens",), ("max_completion_tokens",),
            ("parallel_tool_calls",), ("reasoning_effort",),
        ],
    ),
    "/v1/responses": (
        {"model": "demo-chat", "input": [USER]},
        "compatible",
        [
            ("input",), ("input", 0), ("input", 0, "content"), ("input", 0, "content", 0), ("tools",),
            ("tools", 0), ("tool_choice",), ("metadata",), ("instructions",), ("text",), ("reasoning",),
            ("include",), ("max_output_tokens",), ("store",), ("previous_response_id",),
        ],
    ),
    "/v1/messages": (
        {"model": "demo-chat", "max_tokens": 64, "messages": [USER]},
        "native",
        [
            ("messages",), ("messages", 0), ("messages", 0, "content"), ("messages", 0, "content", 0),
            ("system",), ("tools",), ("tools", 0), ("tool_choice",), ("metadata",), ("thinking",),
            ("stop_sequences",), ("output_config",), ("max_tokens",),
        ],
    ),
    "/v1/messages/count_tokens": (
        {"model": "demo-chat", "messages": [USER]},
        "native",
        [
            ("messages",), ("messages", 0, "content"), ("messages", 0, "content", 0), ("system",),
            ("tools",), ("tools", 0), ("tool_choice",), ("thinking",),
        ],
    ),
}  # fmt: skip
# A tool whose schema the fuzz fills, and a forced call of it, for the demo's argument maker.
FORCED_TOOL = {
    "/v1/chat/completions": lambda schema: {
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
        "tool_choice": "required",
    },
    "/v1/responses": lambda schema: {
        "tools": [{"type": "function", "name": "f", "parameters": schema}],
        "tool_choice": "required",
    },
    "/v1/messages": lambda schema: {
        "tools": [{"name": "f", "input_schema": schema}],
        "tool_choice": {"type": "any"},
    },
}
FUZZ = fuzz_settings()
RECORDED = {entry["file"]: (entry["endpoint"], corpus_body(entry)) for entry in corpus_index()}
# Above the largest output limit a recorded client asks for (the AI SDK's 64,000 for a Claude).
MAX_OUTPUT_TOKENS = 64000


@pytest.fixture
def fuzzed(chat_group, demo_upstream, tara, tara_key, client):
    text_model_make(
        model_id="demo-chat", group=chat_group, upstreams=[demo_upstream], max_output_tokens=MAX_OUTPUT_TOKENS
    )
    wallet_top_up(account=tara, amount="1000.00", reference="fuzz")

    def send(path: str, body: dict[str, Any]):
        return client.post(
            path,
            data=json.dumps(body),  # ensure_ascii: unpaired surrogates go out as \\udXXX escapes
            content_type="application/json",
            headers={"x-api-key": tara_key},
        )

    return send


def placed(body: dict[str, Any], where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of `body` with `value` at `where`: list items appended, missing containers made, and
    content in a list of parts when the value goes into a part."""
    body = copy.deepcopy(body)
    if len(where) == 4:
        body[where[0]][0]["content"] = [{"type": "text", "text": "hi"}]
    holder: Any = body
    for step, after in itertools.pairwise(where):
        if isinstance(holder, dict) and step not in holder:
            holder[step] = [] if isinstance(after, int) else {}
        if isinstance(holder, list) and step >= len(holder):
            holder.append([] if isinstance(after, int) else {})
        holder = holder[step]
    last = where[-1]
    if isinstance(holder, list) and last >= len(holder):
        holder.append(value)
    else:
        holder[last] = value
    return body


def positions(value: Any) -> list[tuple[Any, ...]]:
    """The path of every value inside `value`: each member of an object and item of a list, at any
    depth (iterative)."""
    found: list[tuple[Any, ...]] = []
    pending: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while pending:
        path, node = pending.pop()
        children = (
            node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        )
        for key, child in children:
            found.append((*path, key))
            pending.append(((*path, key), child))
    return found


def recorded_case(data: st.DataObject, value: Any, *, stream: bool) -> tuple[str, dict[str, Any]]:
    """(endpoint, body): a recorded body, its model made `demo-chat` and streamed as asked, with
    `value` in place of any one of its values."""
    path, recorded = RECORDED[data.draw(st.sampled_from(sorted(RECORDED)))]
    body = {**copy.deepcopy(recorded), "model": "demo-chat"}
    if not path.endswith("count_tokens"):
        body["stream"] = stream
    *steps, last = data.draw(st.sampled_from(positions(body)))
    holder: Any = body
    for step in steps:
        holder = holder[step]
    holder[last] = value
    return path, body


def assert_answered_well(response, shape: str) -> None:
    assert response.status_code < 500, response.content[:500]
    assert_in_family_shape(response, shape)


@pytest.mark.parametrize("path", list(FAMILIES))
@FUZZ
@given(data=st.data(), value=JSON_VALUES, stream=st.booleans())
def test_any_json_value_in_any_field_is_never_a_server_error(fuzzed, path, data, value, stream):
    body, shape, places = FAMILIES[path]
    where = data.draw(st.sampled_from(places))
    body = placed(body, where, value)
    if stream and not path.endswith("count_tokens"):
        body["stream"] = True

    assert_answered_well(fuzzed(path, body), shape)
    assert ledger_check() == []


@FUZZ
@given(data=st.data(), value=JSON_VALUES, stream=st.booleans())
def test_any_json_value_anywhere_in_a_recorded_client_body_is_never_a_server_error(
    fuzzed, data, value, stream
):
    path, body = recorded_case(data, value, stream=stream)

    assert_answered_well(fuzzed(path, body), FAMILIES[path][1])
    assert ledger_check() == []


@pytest.mark.parametrize("path", list(FORCED_TOOL))
@FUZZ
@given(schema=JSON_VALUES, stream=st.booleans())
def test_any_tool_schema_with_a_forced_call_is_never_a_server_error(fuzzed, path, schema, stream):
    base, shape, _ = FAMILIES[path]
    body = {**base, **FORCED_TOOL[path](schema), "stream": stream}

    assert_answered_well(fuzzed(path, body), shape)
    assert ledger_check() == []
