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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CHAT_DONE = "[DONE]"  # the data of a chat stream's last event (not JSON)


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


def chat_completion(answer: Answer) -> dict[str, Any]:
    """A chat completion of one assistant message; finish_reason "length" when the output limit cut it."""
    message = {"role": "assistant", "content": answer.text, "refusal": None, "annotations": []}
    finish_reason = "length" if answer.truncated else "stop"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
    return {
        "id": f"chatcmpl-{answer.tag}",
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "service_tier": "default",
        "system_fingerprint": None,
        "choices": [choice],
        "usage": _chat_usage(answer),
    }


def chat_chunks(
    *, completion: dict[str, Any], deltas: Sequence[str], include_usage: bool
) -> list[dict[str, Any]]:
    """`completion` streamed: the role, a chunk per delta, the finish reason, and the usage alone in a
    last chunk (`choices: []`) only when the request asked for it (`stream_options.include_usage`),
    as OpenAI does, with `"usage": null` on every chunk before it. CHAT_DONE follows them."""
    head = {key: value for key, value in completion.items() if key not in ("choices", "usage")}
    head["object"] = "chat.completion.chunk"
    no_usage_yet = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**head, "choices": [choice], **no_usage_yet}

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    chunks += [chunk({"content": delta}) for delta in deltas]
    chunks.append(chunk({}, completion["choices"][0]["finish_reason"]))
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


def response_object(
    answer: Answer,
    *,
    instructions: str | list[Any] | None = None,
    max_output_tokens: int | None = None,
    metadata: dict[str, Any] | None = None,
    store: bool = True,
) -> dict[str, Any]:
    """A finished response of one message item: completed, or incomplete when the output limit cut
    it. It echoes the request's instructions, max_output_tokens and metadata; `store` says whether
    the response is kept for later retrieval (OpenAI's default is true)."""
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
        "output": [
            {
                "type": "message",
                "id": f"msg_{answer.tag}",
                "status": status,
                "role": "assistant",
                "content": [_output_text(answer.text)],
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": store,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _responses_usage(answer),
        "user": None,
        "metadata": metadata or {},
    }


def response_events(*, response: dict[str, Any], deltas: Sequence[str]) -> list[dict[str, Any]]:
    """The stream of `response` (a response_object): created and in progress (no output, no usage
    yet), the item and its text part opened, a delta each, everything closed, then the response whole
    (`response.completed`, or `response.incomplete` as OpenAI ends a stream the limit cut). Each event
    has its `sequence_number`, from 0."""
    item = response["output"][0]
    part = item["content"][0]
    started = {**response, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
        ),
        ("response.content_part.added", {**where, "part": _output_text("")}),
        *(("response.output_text.delta", {**where, "delta": delta, "logprobs": []}) for delta in deltas),
        ("response.output_text.done", {**where, "text": part["text"], "logprobs": []}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        (f"response.{response['status']}", {"response": response}),
    ]
    return [{"type": name, "sequence_number": number, **data} for number, (name, data) in enumerate(events)]


# --- Anthropic messages ----------------------------------------------------------------------------


def message_object(answer: Answer) -> dict[str, Any]:
    """A message of one text block; stop_reason "max_tokens" when the output limit cut it."""
    return {
        "id": f"msg_{answer.tag}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": [{"type": "text", "text": answer.text}],
        "stop_reason": "max_tokens" if answer.truncated else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": answer.input_tokens,
            "cache_creation_input_tokens": answer.cache_write_tokens,
            "cache_read_input_tokens": answer.cached_tokens,
            "output_tokens": answer.output_tokens,
            "service_tier": "standard",
        },
    }


def message_events(*, message: dict[str, Any], deltas: Sequence[str], ping: bool) -> list[dict[str, Any]]:
    """The stream of `message`: the message opened (no content, no stop reason, the input usage and
    one output token so far), its text block opened, a `ping` when asked (the provider sends one), a
    delta each, the block closed, the stop reason with the output tokens, the end."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *([{"type": "ping"}] if ping else []),
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}}
            for delta in deltas
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}},
        {"type": "message_stop"},
    ]
