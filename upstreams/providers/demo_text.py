"""The `demo` kind's text answers, made offline: chat completions, responses, messages and token
counts, streamed or not, each in its family's wire shape as the official SDKs parse it.

The answer is deterministic text about the prompt ("Demo reply to: ..."), with real usage: tokens
are the pieces a simple tokenizer finds (`\\w+` runs and single punctuation marks), counted over
every text of the request plus a few per message, and over the text produced. The output limit a
request sets (`max_tokens`, `max_completion_tokens`, `max_output_tokens`) cuts the text and ends the
answer as the family ends a truncated one.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from upstreams.providers.base import (
    CHAT_COMPLETIONS,
    EVENT_STREAM,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    RESPONSES,
    SSEEvent,
    TextReply,
    TextRequest,
)

_PIECE = re.compile(r"\w+|[^\w\s]")
_DELTA = re.compile(r"\s*\S+")  # one word with the space before it: a streamed delta
TOKENS_PER_MESSAGE = 3  # a message's role and separators
ECHO_WORDS = 8
PADDING = (
    "This answer was written offline by the gateway's demo provider, so that every step of a call "
    "can be tried without a model or a provider key."
)
# The text fields of a message, content part or input item (tool call arguments, images and the
# like are not counted).
TEXT_KEYS = ("text", "content", "output")
LIMIT_FIELDS = {
    CHAT_COMPLETIONS: ("max_completion_tokens", "max_tokens"),
    RESPONSES: ("max_output_tokens",),
    MESSAGES: ("max_tokens",),
    MESSAGES_COUNT_TOKENS: (),
}
ANTHROPIC_FAMILY = (MESSAGES, MESSAGES_COUNT_TOKENS)


def token_count(text: str) -> int:
    return sum(1 for _ in _PIECE.finditer(text))


def _texts(value: Any) -> Iterator[str]:
    """Every text in a message, its content parts or an input item, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, dict):
        for key in TEXT_KEYS:
            if key in value:
                yield from _texts(value[key])


@dataclass(frozen=True)
class Conversation:
    """What a request says, whatever its family: its messages, and the instructions beside them
    (Anthropic's `system`, the Responses API's `instructions`)."""

    messages: list[Any]
    instructions: Any

    @classmethod
    def of(cls, operation: str, body: dict[str, Any]) -> Conversation:
        if operation == RESPONSES:
            items = body.get("input")
            if isinstance(items, str):
                items = [{"role": "user", "content": items}]
            return cls(messages=_listed(items), instructions=body.get("instructions"))
        instructions = body.get("system") if operation in ANTHROPIC_FAMILY else None
        return cls(messages=_listed(body.get("messages")), instructions=instructions)

    def input_tokens(self) -> int:
        parts = [*self.messages, *([self.instructions] if self.instructions else [])]
        return sum(TOKENS_PER_MESSAGE + sum(map(token_count, _texts(part))) for part in parts)

    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return " ".join(_texts(message))
        return ""


def _listed(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return [value] if value else []


@dataclass(frozen=True)
class Answer:
    """The demo's answer to one request, before any family shapes it."""

    id: str
    created: int
    model: str
    text: str
    input_tokens: int
    output_tokens: int
    truncated: bool  # the output limit cut the text
    limit: int | None

    @classmethod
    def of(cls, operation: str, body: dict[str, Any], raw: bytes) -> Answer:
        conversation = Conversation.of(operation, body)
        limit = _limit(body, LIMIT_FIELDS[operation])
        text, truncated = _cut(_reply_text(conversation.last_user_text()), limit)
        model = body.get("model")
        return cls(
            id=hashlib.sha256(raw).hexdigest()[:24],
            created=int(time.time()),
            model=model if isinstance(model, str) and model else "demo",
            text=text,
            input_tokens=conversation.input_tokens(),
            output_tokens=token_count(text),
            truncated=truncated,
            limit=limit,
        )

    def deltas(self) -> list[str]:
        """The text in the pieces a stream sends, one word each."""
        return _DELTA.findall(self.text)


def _reply_text(prompt: str) -> str:
    words = prompt.split()
    if not words:
        return f"Demo reply. {PADDING}"
    echo = " ".join(words[:ECHO_WORDS]) + (" ..." if len(words) > ECHO_WORDS else "")
    return f'Demo reply to: "{echo}". {PADDING}'


def _limit(body: dict[str, Any], fields: tuple[str, ...]) -> int | None:
    for name in fields:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(0, value)
    return None


def _cut(text: str, limit: int | None) -> tuple[str, bool]:
    """The text cut to its first `limit` tokens, and whether anything was cut."""
    if limit is None:
        return text, False
    end = 0
    for count, piece in enumerate(_PIECE.finditer(text)):
        if count == limit:
            return text[:end], True
        end = piece.end()
    return text, False


# --- the families' shapes --------------------------------------------------------------------------


def _chat_usage(answer: Answer) -> dict[str, Any]:
    return {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_head(answer: Answer, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-demo{answer.id}",
        "object": obj,
        "created": answer.created,
        "model": answer.model,
        "service_tier": "default",
        "system_fingerprint": None,
    }


def _chat_finish(answer: Answer) -> str:
    return "length" if answer.truncated else "stop"


def chat_completion(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": answer.text, "refusal": None, "annotations": []}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _chat_finish(answer)}
    return {**_chat_head(answer, "chat.completion"), "choices": [choice], "usage": _chat_usage(answer)}


def chat_chunks(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """The role, each word, the finish reason; the usage chunk only when the request asks for it
    (`stream_options.include_usage`), as OpenAI does; then [DONE]."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    head = _chat_head(answer, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> SSEEvent:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _event("", {**head, "choices": [choice], **({"usage": None} if include_usage else {})})

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for delta in answer.deltas():
        yield chunk({"content": delta})
    yield chunk({}, _chat_finish(answer))
    if include_usage:
        yield _event("", {**head, "choices": [], "usage": _chat_usage(answer)})
    yield SSEEvent(event="", data="[DONE]")


def _response_status(answer: Answer) -> str:
    return "incomplete" if answer.truncated else "completed"


def _response_item(answer: Answer, *, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [_output_text(text)]
    return {
        "id": f"msg_demo{answer.id}",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _response(answer: Answer, body: dict[str, Any], *, status: str, output: list[Any]) -> dict[str, Any]:
    done = status != "in_progress"
    instructions = body.get("instructions")
    metadata = body.get("metadata")
    return {
        "id": f"resp_demo{answer.id}",
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": instructions if isinstance(instructions, str) else None,
        "max_output_tokens": answer.limit,
        "model": answer.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _response_usage(answer) if done else None,
        "user": None,
        "metadata": metadata if isinstance(metadata, dict) else {},
    }


def _response_usage(answer: Answer) -> dict[str, Any]:
    return {
        "input_tokens": answer.input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": answer.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }


def response_object(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    status = _response_status(answer)
    item = _response_item(answer, text=answer.text, status=status)
    return _response(answer, body, status=status, output=[item])


def response_events(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """The Responses API's stream of one message: created, in progress, the item and its text part
    opened, each word, then everything closed; the last event says completed, or incomplete when the
    output limit cut the text (as OpenAI ends such a stream)."""
    status = _response_status(answer)
    ids = {"item_id": f"msg_demo{answer.id}", "output_index": 0}
    part = {**ids, "content_index": 0}
    item = _response_item(answer, text=answer.text, status=status)
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _response(answer, body, status="in_progress", output=[])}),
        ("response.in_progress", {"response": _response(answer, body, status="in_progress", output=[])}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": _response_item(answer, text=None, status="in_progress")},
        ),
        ("response.content_part.added", {**part, "part": _output_text("")}),
        *(("response.output_text.delta", {**part, "delta": d, "logprobs": []}) for d in answer.deltas()),
        ("response.output_text.done", {**part, "text": answer.text, "logprobs": []}),
        ("response.content_part.done", {**part, "part": _output_text(answer.text)}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        (
            f"response.{status}",
            {"response": _response(answer, body, status=status, output=[item])},
        ),
    ]
    for number, (name, data) in enumerate(events):
        yield _event(name, {"type": name, "sequence_number": number, **data})


def _message_usage(answer: Answer, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": answer.input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "service_tier": "standard",
    }


def _message(answer: Answer, *, content: list[Any], stop_reason: str | None, usage: dict[str, Any]):
    return {
        "id": f"msg_demo{answer.id}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _stop_reason(answer: Answer) -> str:
    return "max_tokens" if answer.truncated else "end_turn"


def message_object(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return _message(
        answer,
        content=[{"type": "text", "text": answer.text}],
        stop_reason=_stop_reason(answer),
        usage=_message_usage(answer, answer.output_tokens),
    )


def message_events(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """Anthropic's stream of one text block: the message opened (input tokens known, one output
    token so far), the block's words, the stop reason with the output tokens, the end."""
    start = _message(answer, content=[], stop_reason=None, usage=_message_usage(answer, 1))
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": start}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        *(
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": d}})
            for d in answer.deltas()
        ),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": _stop_reason(answer), "stop_sequence": None},
                "usage": {"output_tokens": answer.output_tokens},
            },
        ),
        ("message_stop", {}),
    ]
    for name, data in events:
        yield _event(name, {"type": name, **data})


def token_count_object(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return {"input_tokens": answer.input_tokens}


Shape = Callable[[Answer, dict[str, Any]], dict[str, Any]]
Stream = Callable[[Answer, dict[str, Any]], Iterator[SSEEvent]]
SHAPES: dict[str, tuple[Shape, Stream | None]] = {
    CHAT_COMPLETIONS: (chat_completion, chat_chunks),
    RESPONSES: (response_object, response_events),
    MESSAGES: (message_object, message_events),
    MESSAGES_COUNT_TOKENS: (token_count_object, None),  # never streamed
}


def demo_text_reply(operation: str, request: TextRequest) -> TextReply:
    """The demo's answer to a text operation: a JSON body, or events when streaming was asked."""
    try:
        body = json.loads(request.body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _invalid_request(operation, "The request body must be a JSON object.")
    answer = Answer.of(operation, body, request.body)
    shape, stream = SHAPES[operation]
    if request.stream and stream is not None:
        return TextReply(status=200, content_type=EVENT_STREAM, events=stream(answer, body))
    return _json_reply(200, shape(answer, body))


def _invalid_request(operation: str, message: str) -> TextReply:
    """A 400 in the family's own error shape, as its provider answers one."""
    if operation in ANTHROPIC_FAMILY:
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        error = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    return _json_reply(400, error)


def _json_reply(status: int, payload: dict[str, Any]) -> TextReply:
    return TextReply(status=status, content_type="application/json", body=_json(payload).encode())


def _event(name: str, payload: dict[str, Any]) -> SSEEvent:
    return SSEEvent(event=name, data=_json(payload))


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
