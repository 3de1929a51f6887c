"""The `demo` kind's text answers, made offline: chat completions, responses, messages and token
counts, streamed or not, each in its family's wire shape as the official SDKs parse it (built by
text_shapes, as the fake upstreams of the tests and the benchmarks build theirs).

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

from upstreams import text_shapes
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
    """The demo's answer to one request: what it says, before any family shapes it, and the output
    limit the request set."""

    said: text_shapes.Answer
    limit: int | None

    @classmethod
    def of(cls, operation: str, body: dict[str, Any], raw: bytes) -> Answer:
        conversation = Conversation.of(operation, body)
        limit = _limit(body, LIMIT_FIELDS[operation])
        text, truncated = _cut(_reply_text(conversation.last_user_text()), limit)
        model = body.get("model")
        said = text_shapes.Answer(
            tag=f"demo{hashlib.sha256(raw).hexdigest()[:24]}",
            created=int(time.time()),
            model=model if isinstance(model, str) and model else "demo",
            text=text,
            truncated=truncated,
            input_tokens=conversation.input_tokens(),
            output_tokens=token_count(text),
        )
        return cls(said=said, limit=limit)

    def deltas(self) -> list[str]:
        """The text in the pieces a stream sends, one word each."""
        return _DELTA.findall(self.said.text)


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


# --- the families' shapes (text_shapes) ------------------------------------------------------------


def chat_completion(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return text_shapes.chat_completion(answer.said)


def chat_chunks(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """The role, each word, the finish reason; the usage chunk only when the request asks for it
    (`stream_options.include_usage`), as OpenAI does; then [DONE]."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    chunks = text_shapes.chat_chunks(
        completion=chat_completion(answer, body), deltas=answer.deltas(), include_usage=include_usage
    )
    for chunk in chunks:
        yield _event("", chunk)
    yield SSEEvent(event="", data=text_shapes.CHAT_DONE)


def response_object(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    """The response, echoing the request's instructions (text ones), output limit and metadata; not
    stored (the demo keeps nothing to retrieve later)."""
    instructions = body.get("instructions")
    metadata = body.get("metadata")
    return text_shapes.response_object(
        answer.said,
        instructions=instructions if isinstance(instructions, str) else None,
        max_output_tokens=answer.limit,
        metadata=metadata if isinstance(metadata, dict) else None,
        store=False,
    )


def response_events(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """The Responses API's stream of one message: created, in progress, the item and its text part
    opened, each word, then everything closed; the last event says completed, or incomplete when the
    output limit cut the text (as OpenAI ends such a stream)."""
    events = text_shapes.response_events(response=response_object(answer, body), deltas=answer.deltas())
    for event in events:
        yield _event(event["type"], event)


def message_object(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return text_shapes.message_object(answer.said)


def message_events(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """Anthropic's stream of one text block: the message opened (input tokens known, one output
    token so far), the block's words, the stop reason with the output tokens, the end. No ping: the
    demo's answer is there at once, with no wait to fill."""
    message = message_object(answer, body)
    for event in text_shapes.message_events(message=message, deltas=answer.deltas(), ping=False):
        yield _event(event["type"], event)


def token_count_object(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return {"input_tokens": answer.said.input_tokens}


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
