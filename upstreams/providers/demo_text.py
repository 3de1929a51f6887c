"""The `demo` kind's text answers, made offline: chat completions, responses, messages and token
counts, streamed or not, each in its family's wire shape as the official SDKs parse it (built by
text_shapes, as the fake upstreams of the tests and the benchmarks build theirs).

It behaves as a model does for agent clients (demo_text_request reads what a request asks):

- it refuses what the real APIs refuse, with their status and error shape, so nothing invalid is
  charged;
- when the request forces a tool call (`tool_choice` required, any or a named tool) or the caller's
  last text names one of its function tools, it calls that tool with arguments made from the tool's
  JSON schema (`jsf`) and checked against it (`jsonschema`); after a tool's result it answers in text;
- JSON mode answers a JSON object, a JSON-schema format JSON valid against the schema;
- `n` gives that many choices, stop sequences end the text, every answer has ids of its own.

The text is deterministic ("Demo reply to: ..."), with real usage: tokens are the pieces a simple
tokenizer finds (`\\w+` runs and single punctuation marks), counted over every text of the request
and its tools plus a few per message, and over what is produced. The output limit a request sets
(`max_tokens`, `max_completion_tokens`, `max_output_tokens`) cuts the text and ends the answer as
the family ends a truncated one.
"""

from __future__ import annotations

import json
import re
import secrets
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
from upstreams.providers.demo_text_request import DemoAsk, Refusal, Tool, schema_validator, texts_of

_PIECE = re.compile(r"\w+|[^\w\s]")
_DELTA = re.compile(r"\s*\S+")  # one word with the space before it: a streamed delta
TOKENS_PER_MESSAGE = 3  # a message's role and separators
ECHO_WORDS = 8
JSON_PIECE = 12  # characters of a JSON answer per streamed delta
GENERATION_TRIES = 5  # schema-made values tried until one validates
PADDING = (
    "This answer was written offline by the gateway's demo provider, so that every step of a call "
    "can be tried without a model or a provider key."
)
LIMIT_FIELDS = {
    CHAT_COMPLETIONS: ("max_completion_tokens", "max_tokens"),
    RESPONSES: ("max_output_tokens",),
    MESSAGES: ("max_tokens",),
    MESSAGES_COUNT_TOKENS: (),
}
ANTHROPIC_FAMILY = (MESSAGES, MESSAGES_COUNT_TOKENS)


def token_count(text: str) -> int:
    return sum(1 for _ in _PIECE.finditer(text))


def input_tokens(ask: DemoAsk) -> int:
    """Every text of the messages and instructions, a few tokens per message, and the tools'
    definitions."""
    parts = [*ask.messages, *([ask.instructions] if ask.instructions else [])]
    counted = sum(TOKENS_PER_MESSAGE + sum(map(token_count, texts_of(part))) for part in parts)
    return counted + sum(token_count(tool.name) + token_count(_compact(tool.schema)) for tool in ask.tools)


def schema_instance(schema: dict[str, Any]) -> Any:
    """A value valid against `schema`, made by jsf and checked with jsonschema; None when no try
    gave one (jsf does not cover every keyword)."""
    from jsf import JSF

    validator = schema_validator(schema)(schema)
    for _ in range(GENERATION_TRIES):
        try:
            value = JSF(schema).generate()
        except Exception:  # noqa: S112 - jsf fails on some valid schemas: try again, then give up
            continue
        if validator.is_valid(value):
            return value
    return None


@dataclass(frozen=True)
class Answer:
    """The demo's answer to one request: what it says, before any family shapes it, and the output
    limit the request set."""

    said: text_shapes.Answer
    limit: int | None
    json_answer: bool = False  # the text is JSON: streamed in fixed pieces rather than words

    @classmethod
    def of(cls, operation: str, body: dict[str, Any], ask: DemoAsk) -> Answer:
        limit = _limit(body, LIMIT_FIELDS[operation])
        model = body.get("model")
        tag = f"demo{secrets.token_hex(12)}"
        calls = _tool_calls(ask, tag)
        text, stop_sequence, json_answer = "", None, False
        if not calls:
            text, json_answer = _content(ask)
            text, stop_sequence = _stop_cut(text, ask.stop)
        text, truncated = _cut(text, limit)
        produced = text or "".join(call.name + call.arguments for call in calls)
        said = text_shapes.Answer(
            tag=tag,
            created=int(time.time()),
            model=model if isinstance(model, str) and model else "demo",
            text=text,
            truncated=truncated,
            input_tokens=input_tokens(ask),
            output_tokens=token_count(produced) * ask.choices,
            tool_calls=calls,
            stop_sequence=stop_sequence,
            choices=ask.choices,
        )
        return cls(said=said, limit=limit, json_answer=json_answer)

    def deltas(self) -> list[str]:
        """The text in the pieces a stream sends: one word each, or fixed slices of JSON."""
        text = self.said.text
        if self.json_answer:
            return [text[start : start + JSON_PIECE] for start in range(0, len(text), JSON_PIECE)]
        return _DELTA.findall(text)


def _tool_calls(ask: DemoAsk, tag: str) -> tuple[text_shapes.ToolCall, ...]:
    if ask.call is None:
        return ()
    arguments = _arguments(ask.call)
    if arguments is None:
        return ()
    return (text_shapes.ToolCall(tag=tag, name=ask.call.name, arguments=_compact(arguments)),)


def _arguments(tool: Tool) -> dict[str, Any] | None:
    """The tool's arguments: an object valid against its schema (None when none could be made)."""
    value = schema_instance(tool.schema)
    return value if isinstance(value, dict) else None


def _content(ask: DemoAsk) -> tuple[str, bool]:
    """The answer's text and whether it is JSON."""
    prompt = _last_text(ask)
    reply = _reply_text(prompt, after_tool_result=ask.after_tool_result)
    if ask.json_schema is None:
        return reply, False
    if ask.json_schema:
        value = schema_instance(ask.json_schema)
        if value is not None:
            return _compact(value), True
    return _compact({"reply": reply}), True


def _last_text(ask: DemoAsk) -> str:
    """The text the answer speaks to: the last message's tool results, or the last text of the
    caller's last message (agent clients put their reminders in earlier parts of it)."""
    for message in reversed(ask.messages):
        if isinstance(message, dict) and ask.after_tool_result:
            return " ".join(_result_texts(message))
        if isinstance(message, dict) and message.get("role") == "user":
            texts = texts_of(message)
            return texts[-1] if texts else ""
    return ""


def _result_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, list):
        results = [
            block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        if results:  # Anthropic: the tool_result blocks' content
            return [text for block in results for text in texts_of(block.get("content"))]
    return texts_of(message)  # a tool message's content (a string or text parts), a function call's output


def _reply_text(prompt: str, *, after_tool_result: bool = False) -> str:
    words = prompt.split()
    if not words:
        return f"Demo reply. {PADDING}"
    echo = " ".join(words[:ECHO_WORDS]) + (" ..." if len(words) > ECHO_WORDS else "")
    if after_tool_result:
        return f'Demo reply after the tool result: "{echo}". {PADDING}'
    return f'Demo reply to: "{echo}". {PADDING}'


def _stop_cut(text: str, stop: tuple[str, ...]) -> tuple[str, str | None]:
    """The text up to the first of the stop sequences it contains, and that sequence."""
    found = [(text.find(sequence), sequence) for sequence in stop if sequence in text]
    if not found:
        return text, None
    at, sequence = min(found)
    return text[:at], sequence


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


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- the families' shapes (text_shapes) ------------------------------------------------------------


def chat_completion(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return text_shapes.chat_completion(answer.said)


def chat_chunks(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """Per choice the role, each word (or each tool call's name, then its arguments in pieces), the
    finish reason; the usage chunk only when the request asks for it
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
    text = body.get("text")
    text_format = text.get("format") if isinstance(text, dict) else None
    return text_shapes.response_object(
        answer.said,
        instructions=instructions if isinstance(instructions, str) else None,
        max_output_tokens=answer.limit,
        metadata=metadata if isinstance(metadata, dict) else None,
        store=False,
        text_format=text_format if isinstance(text_format, dict) else None,
    )


def response_events(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """The Responses API's stream of one message (or of function calls): created, in progress, the
    item and its text part opened, each word (a call's arguments in pieces), then everything closed;
    the last event says completed, or incomplete when the output limit cut the text (as OpenAI ends
    such a stream)."""
    events = text_shapes.response_events(response=response_object(answer, body), deltas=answer.deltas())
    for event in events:
        yield _event(event["type"], event)


def message_object(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return text_shapes.message_object(answer.said)


def message_events(answer: Answer, body: dict[str, Any]) -> Iterator[SSEEvent]:
    """Anthropic's stream of one text block (or tool_use blocks): the message opened (input tokens
    known, one output token so far), the block's words (a tool input's JSON in pieces), the stop
    reason with the output tokens, the end. No ping: the demo's answer is there at once, with no
    wait to fill."""
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
    try:
        ask = DemoAsk.read(operation, body)
    except Refusal as refusal:
        return _invalid_request(operation, refusal.message, param=refusal.param)
    answer = Answer.of(operation, body, ask)
    shape, stream = SHAPES[operation]
    if request.stream and stream is not None:
        return TextReply(status=200, content_type=EVENT_STREAM, events=stream(answer, body))
    return _json_reply(200, shape(answer, body))


def _invalid_request(operation: str, message: str, *, param: str | None = None) -> TextReply:
    """A 400 in the family's own error shape, as its provider answers one."""
    if operation in ANTHROPIC_FAMILY:
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    else:
        error = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return _json_reply(400, error)


def _json_reply(status: int, payload: dict[str, Any]) -> TextReply:
    return TextReply(status=status, content_type="application/json", body=_compact(payload).encode())


def _event(name: str, payload: dict[str, Any]) -> SSEEvent:
    return SSEEvent(event=name, data=_compact(payload))
