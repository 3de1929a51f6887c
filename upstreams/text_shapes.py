"""The wire shapes of the three text families (OpenAI chat completions, OpenAI responses, Anthropic
messages) as their providers send them and the official SDKs parse them, built in one place for all
that answers in them: the `demo` kind (providers/demo_text.py) and the fake upstreams of the tests
and the benchmarks. It imports nothing of the project, so that the fakes stay light processes.

The caller brings what is its own, an `Answer` (the ids' tag, model, creation time, text, token
counts) and what the request echoes; the rest is fixed here, as the provider sends it for a plain
request. Every shape is a plain dict. A stream is built from its whole answer, so that the two always
agree, as the list of its events' payloads: chat chunks (each sent as a `data:` line, CHAT_DONE after
the last), or events whose `type` is also their SSE event name (responses, messages).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CHAT_DONE = "[DONE]"  # the data of a chat stream's last event (not JSON)
ARGUMENT_PIECE = 16  # characters of a tool call's arguments per streamed delta


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of a function tool: `tag` makes its ids (call_{tag}, fc_{tag}, toolu_{tag}),
    `arguments` is the arguments object as JSON text."""

    tag: str
    name: str
    arguments: str


def _pieces(text: str) -> list[str]:
    return [text[start : start + ARGUMENT_PIECE] for start in range(0, len(text), ARGUMENT_PIECE)]


@dataclass(frozen=True, slots=True)
class Answer:
    """What one answer says, whichever family shapes it. Token counts are as the family reports
    them (the caller knows which family it answers in)."""

    tag: str  # in the ids: chatcmpl-{tag}, resp_{tag}, msg_{tag}
    created: int
    model: str
    text: str
    truncated: bool  # the output limit cut the text
    input_tokens: int  # OpenAI: cached ones included; Anthropic: the uncached ones
    output_tokens: int  # reasoning ones included
    cached_tokens: int = 0  # OpenAI: part of input_tokens; Anthropic: the cache reads, on top
    cache_write_tokens: int = 0  # Anthropic's cache_creation_input_tokens, on top of input_tokens
    reasoning_tokens: int = 0  # OpenAI: part of output_tokens
    tool_calls: tuple[ToolCall, ...] = ()  # when set, the answer is these calls instead of text
    stop_sequence: str | None = None  # the caller's stop sequence that ended the text
    choices: int = 1  # chat completions' `n`: that many choices, each this answer (counts are the sum)


# --- OpenAI chat completions -----------------------------------------------------------------------


def _chat_usage(answer: Answer) -> dict[str, Any]:
    return {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": answer.cached_tokens,
            "cache_write_tokens": answer.cache_write_tokens,
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": answer.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_finish_reason(answer: Answer) -> str:
    if answer.tool_calls:
        return "tool_calls"
    return "length" if answer.truncated else "stop"


def _chat_tool_calls(answer: Answer) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{call.tag}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in answer.tool_calls
    ]


def chat_completion(answer: Answer) -> dict[str, Any]:
    """A chat completion of `answer.choices` assistant messages: the text, or the tool calls
    (finish_reason "tool_calls"); finish_reason "length" when the output limit cut the text."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": answer.text,
        "refusal": None,
        "annotations": [],
    }
    if answer.tool_calls:
        message = {**message, "content": None, "tool_calls": _chat_tool_calls(answer)}
    finish_reason = _chat_finish_reason(answer)
    choices = [
        {"index": index, "message": message, "logprobs": None, "finish_reason": finish_reason}
        for index in range(answer.choices)
    ]
    return {
        "id": f"chatcmpl-{answer.tag}",
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "service_tier": "default",
        "system_fingerprint": None,
        "choices": choices,
        "usage": _chat_usage(answer),
    }


def chat_chunks(
    *, completion: dict[str, Any], deltas: Sequence[str], include_usage: bool
) -> list[dict[str, Any]]:
    """`completion` streamed, choice after choice: the role, a chunk per delta of the text (or, for tool
    calls, each call's id and name, then its arguments in pieces), the finish reason; then the usage
    alone in a last chunk (`choices: []`) only when the request asked for it
    (`stream_options.include_usage`), as OpenAI does, with `"usage": null` on every chunk before it.
    CHAT_DONE follows them."""
    head = {key: value for key, value in completion.items() if key not in ("choices", "usage")}
    head["object"] = "chat.completion.chunk"
    no_usage_yet = {"usage": None} if include_usage else {}
    chunks: list[dict[str, Any]] = []
    for choice in completion["choices"]:

        def chunk(
            delta: dict[str, Any], finish_reason: str | None = None, index: int = choice["index"]
        ) -> dict[str, Any]:
            part = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return {**head, "choices": [part], **no_usage_yet}

        calls = choice["message"].get("tool_calls") or []
        chunks.append(chunk({"role": "assistant", "content": None if calls else "", "refusal": None}))
        if not calls:
            chunks += [chunk({"content": delta}) for delta in deltas]
        for number, call in enumerate(calls):
            function = call["function"]
            opened = {"index": number, "id": call["id"], "type": "function"}
            chunks.append(
                chunk({"tool_calls": [{**opened, "function": {"name": function["name"], "arguments": ""}}]})
            )
            chunks += [
                chunk({"tool_calls": [{"index": number, "function": {"arguments": piece}}]})
                for piece in _pieces(function["arguments"])
            ]
        chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks


# --- OpenAI responses ------------------------------------------------------------------------------


def _responses_usage(answer: Answer) -> dict[str, Any]:
    return {
        "input_tokens": answer.input_tokens,
        "input_tokens_details": {
            "cached_tokens": answer.cached_tokens,
            "cache_write_tokens": answer.cache_write_tokens,
        },
        "output_tokens": answer.output_tokens,
        "output_tokens_details": {"reasoning_tokens": answer.reasoning_tokens},
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _response_output(answer: Answer, status: str) -> list[dict[str, Any]]:
    if answer.tool_calls:
        return [
            {
                "type": "function_call",
                "id": f"fc_{call.tag}",
                "call_id": f"call_{call.tag}",
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
            for call in answer.tool_calls
        ]
    return [
        {
            "type": "message",
            "id": f"msg_{answer.tag}",
            "status": status,
            "role": "assistant",
            "content": [_output_text(answer.text)],
        }
    ]


def response_object(
    answer: Answer,
    *,
    instructions: str | list[Any] | None = None,
    max_output_tokens: int | None = None,
    metadata: dict[str, Any] | None = None,
    store: bool = True,
    text_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A finished response of one message item (or of the answer's function calls): completed, or
    incomplete when the output limit cut it. It echoes the request's instructions,
    max_output_tokens, metadata and text format; `store` says whether the response is kept for later
    retrieval (OpenAI's default is true)."""
    status = "incomplete" if answer.truncated else "completed"
    return {
        "id": f"resp_{answer.tag}",
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if answer.truncated else None,
        "instructions": instructions,
        "max_output_tokens": max_output_tokens,
        "model": answer.model,
        "output": _response_output(answer, status),
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": store,
        "temperature": 1.0,
        "text": {"format": text_format or {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _responses_usage(answer),
        "user": None,
        "metadata": metadata or {},
    }


def _response_item_events(
    index: int, item: dict[str, Any], deltas: Sequence[str]
) -> list[tuple[str, dict[str, Any]]]:
    """One output item streamed: added, its content (a text part's deltas, or a call's arguments in
    pieces), done."""
    if item["type"] == "function_call":
        where = {"item_id": item["id"], "output_index": index}
        return [
            (
                "response.output_item.added",
                {"output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}},
            ),
            *(
                ("response.function_call_arguments.delta", {**where, "delta": piece})
                for piece in _pieces(item["arguments"])
            ),
            ("response.function_call_arguments.done", {**where, "arguments": item["arguments"]}),
            ("response.output_item.done", {"output_index": index, "item": item}),
        ]
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    return [
        (
            "response.output_item.added",
            {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
        ),
        ("response.content_part.added", {**where, "part": _output_text("")}),
        *(("response.output_text.delta", {**where, "delta": delta, "logprobs": []}) for delta in deltas),
        ("response.output_text.done", {**where, "text": part["text"], "logprobs": []}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {"output_index": index, "item": item}),
    ]


def response_events(*, response: dict[str, Any], deltas: Sequence[str]) -> list[dict[str, Any]]:
    """The stream of `response` (a response_object): created and in progress (no output, no usage
    yet), each output item opened, filled (a text's deltas, a call's arguments) and closed, then the
    response whole (`response.completed`, or `response.incomplete` as OpenAI ends a stream the limit
    cut). Each event has its `sequence_number`, from 0."""
    started = {**response, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
    ]
    for index, item in enumerate(response["output"]):
        events += _response_item_events(index, item, deltas)
    events.append((f"response.{response['status']}", {"response": response}))
    return [{"type": name, "sequence_number": number, **data} for number, (name, data) in enumerate(events)]


# --- Anthropic messages ----------------------------------------------------------------------------


def message_object(answer: Answer) -> dict[str, Any]:
    """A message of one text block, or of the answer's tool_use blocks (stop_reason "tool_use");
    stop_reason "max_tokens" when the output limit cut the text, "stop_sequence" when one of the
    caller's stop sequences ended it."""
    if answer.tool_calls:
        content: list[dict[str, Any]] = [
            {
                "type": "tool_use",
                "id": f"toolu_{call.tag}",
                "name": call.name,
                "input": json.loads(call.arguments),
            }
            for call in answer.tool_calls
        ]
        stop_reason = "tool_use"
    else:
        content = [{"type": "text", "text": answer.text}]
        stop_reason = "max_tokens" if answer.truncated else "end_turn"
        if answer.stop_sequence is not None and not answer.truncated:
            stop_reason = "stop_sequence"
    return {
        "id": f"msg_{answer.tag}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": answer.stop_sequence if stop_reason == "stop_sequence" else None,
        "usage": {
            "input_tokens": answer.input_tokens,
            "cache_creation_input_tokens": answer.cache_write_tokens,
            "cache_read_input_tokens": answer.cached_tokens,
            "output_tokens": answer.output_tokens,
            "service_tier": "standard",
        },
    }


def _block_events(index: int, block: dict[str, Any], deltas: Sequence[str]) -> list[dict[str, Any]]:
    """One content block streamed: opened empty, filled (text deltas, or a tool_use's input as JSON
    pieces), closed."""
    if block["type"] == "tool_use":
        pieces = _pieces(json.dumps(block["input"], ensure_ascii=False, separators=(",", ":")))
        opened = {**block, "input": {}}
        fill = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
    else:
        opened = {"type": "text", "text": ""}
        fill = [{"type": "text_delta", "text": delta} for delta in deltas]
    return [
        {"type": "content_block_start", "index": index, "content_block": opened},
        *({"type": "content_block_delta", "index": index, "delta": delta} for delta in fill),
        {"type": "content_block_stop", "index": index},
    ]


def message_events(*, message: dict[str, Any], deltas: Sequence[str], ping: bool) -> list[dict[str, Any]]:
    """The stream of `message`: the message opened (no content, no stop reason, the input usage and
    one output token so far), a `ping` when asked (the provider sends one), each block opened,
    filled and closed, the stop reason with the output tokens, the end."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    blocks = [
        event
        for index, block in enumerate(message["content"])
        for event in _block_events(index, block, deltas)
    ]
    return [
        {"type": "message_start", "message": start},
        *blocks[:1],
        *([{"type": "ping"}] if ping else []),
        *blocks[1:],
        {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}},
        {"type": "message_stop"},
    ]
