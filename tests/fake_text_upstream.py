"""The text endpoints of the fake upstream (tests/fake_upstream.py serves them): answers in the wire
formats the official SDKs parse (upstreams/text_shapes.py builds them), made from the request
alone so that tests can predict them.

Paths and families:
- POST /v1/chat/completions (OpenAI chat completions), POST /v1/responses (OpenAI responses),
  POST /v1/messages and /v1/messages/count_tokens (Anthropic messages).

What an answer holds (deterministic):
- The reply is `Fake reply to: <the last text the caller sent, first 60 characters>`; each word (with
  its trailing space) is one output token and one streamed delta. A limit in the request
  (`max_completion_tokens`, `max_tokens`, `max_output_tokens`) shortens it: finish_reason "length",
  status "incomplete", stop_reason "max_tokens".
- Input tokens: 3 + ceil(characters of every string under messages/input/system/instructions/tools
  / 4). count_tokens answers the same number.
- Cache and reasoning counts come from the scripted answer (keys `cached_tokens`,
  `cache_creation_tokens`, `reasoning_tokens`), else from the request headers `x-fake-cached`,
  `x-fake-cache-creation`, `x-fake-reasoning`, else 0. OpenAI: cached tokens are part of the prompt
  tokens (`prompt_tokens_details.cached_tokens`, `input_tokens_details.cached_tokens`; at most all of
  them), reasoning tokens part of the completion tokens (`completion_tokens_details.reasoning_tokens`,
  `output_tokens_details.reasoning_tokens`). Anthropic: `input_tokens` is the uncached count and
  `cache_read_input_tokens` / `cache_creation_input_tokens` come on top, as the provider reports them.
  OpenAI's `cache_write_tokens` are always 0 (its prices have no cache-write rate).
- Streams (`"stream": true`): chat chunks (`data:` lines), ending with a usage-only chunk
  (`choices: []`) when `stream_options.include_usage` is true, then `data: [DONE]`; responses events
  (`event:` + `data:`, `sequence_number` from 0) with the usage in `response.completed`; messages
  events with the input usage in `message_start` (and `output_tokens: 1`, as the provider sends), a
  `ping`, and the cumulative output usage in `message_delta`. Bodies are chunked.

Scripted answers for these paths (besides the status/json/body/drop/hang answers of every path):
- {"status": 529, "error": "Overloaded"}: an error body in the path's family shape (optional
  "error_type", "headers" such as Retry-After).
- {"event_delay": 0.1}: seconds between stream events (any success answer may carry it).
- {"keep_alive": true}: a comment block (`: keep-alive`), as a chunk of its own, before each event.
- {"action": "cut_stream", "after": N}: N events (default 2, never the final one), then the connection
  drops mid-body; with "framing": "close" the body is not chunked, so the cut looks like a clean end.
- {"action": "stream_error", "after": N}: N events, then the family's in-stream error event.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from upstreams import text_shapes

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
TEXT_PATHS = (CHAT, RESPONSES, MESSAGES, COUNT_TOKENS)
ANTHROPIC_PATHS = (MESSAGES, COUNT_TOKENS)

_TEXT_KEYS = ("messages", "input", "system", "instructions", "tools")

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "requests",
}


def error_body(path: str, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    """An error body as the provider of `path` shapes it."""
    if path in ANTHROPIC_PATHS:
        kind = error_type or _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = error_type or _OPENAI_ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def input_tokens_for(payload: dict[str, Any]) -> int:
    """The fake's token count of a request: 3 + ceil(characters of its text / 4)."""
    chars = sum(len(s) for key in _TEXT_KEYS for s in _strings(payload.get(key)))
    return 3 + math.ceil(chars / 4)


def _last_text(payload: dict[str, Any]) -> str:
    """The text of the last message (chat, messages) or input item (responses)."""
    source = payload.get("messages", payload.get("input"))
    if isinstance(source, list) and source:
        source = source[-1]
    if isinstance(source, dict):
        source = source.get("content", "")
    if isinstance(source, list):
        source = " ".join(str(part.get("text", "")) for part in source if isinstance(part, dict))
    return source.strip() if isinstance(source, str) else ""


def reply_pieces(payload: dict[str, Any]) -> list[str]:
    """The reply's words, each with its trailing space: one output token and one delta each."""
    words = f"Fake reply to: {_last_text(payload)[:60]}".split()
    return [word + " " for word in words[:-1]] + words[-1:]


@dataclass(frozen=True)
class Counts:
    input: int  # OpenAI: prompt tokens including cached; Anthropic: uncached input tokens
    cached: int  # OpenAI: cached prompt tokens; Anthropic: cache_read_input_tokens
    cache_creation: int  # Anthropic only
    visible: int  # output tokens of the reply text
    reasoning: int  # OpenAI: counted in the completion tokens
    truncated: bool

    @property
    def output(self) -> int:
        return self.visible + self.reasoning


def _number(answer: dict[str, Any], key: str, headers: Any, header: str) -> int:
    if key in answer:
        return int(answer[key])
    return int(headers.get(header) or 0)


def _limit(payload: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_output_tokens", "max_tokens"):
        if payload.get(key) is not None:
            return int(payload[key])
    return None


class TextAnswer:
    """One successful answer to a text request: a JSON body, or the events of a stream."""

    def __init__(self, path: str, payload: dict[str, Any], headers: Any, answer: dict[str, Any], n: int):
        self.path = path
        self.payload = payload
        self.model = str(payload.get("model") or "fake-model")
        self.created = int(time.time())
        self.n = n
        pieces = reply_pieces(payload)
        limit = _limit(payload)
        self.truncated = limit is not None and limit < len(pieces)
        self.pieces = pieces[: max(limit, 1)] if self.truncated and limit is not None else pieces
        prompt = input_tokens_for(payload)
        cached = _number(answer, "cached_tokens", headers, "x-fake-cached")
        is_anthropic = path in ANTHROPIC_PATHS
        self.counts = Counts(
            input=prompt,
            cached=cached if is_anthropic else min(cached, prompt),
            cache_creation=(
                _number(answer, "cache_creation_tokens", headers, "x-fake-cache-creation")
                if is_anthropic
                else 0
            ),
            visible=len(self.pieces),
            reasoning=0 if is_anthropic else _number(answer, "reasoning_tokens", headers, "x-fake-reasoning"),
            truncated=self.truncated,
        )

    @property
    def streamed(self) -> bool:
        return self.path != COUNT_TOKENS and self.payload.get("stream") is True

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    # Bodies

    def body(self) -> dict[str, Any]:
        if self.path == CHAT:
            return self._chat_completion()
        if self.path == RESPONSES:
            return self._response()
        if self.path == MESSAGES:
            return self._message()
        return {"input_tokens": self.counts.input}

    def events(self) -> list[bytes]:
        """Every event of the stream, the final one last."""
        if self.path == CHAT:
            options = self.payload.get("stream_options") or {}
            chunks = text_shapes.chat_chunks(
                completion=self._chat_completion(),
                deltas=self.pieces,
                include_usage=options.get("include_usage") is True,
            )
            return [_data(chunk) for chunk in chunks] + [f"data: {text_shapes.CHAT_DONE}\n\n".encode()]
        if self.path == RESPONSES:
            events = text_shapes.response_events(response=self._response(), deltas=self.pieces)
        else:
            events = text_shapes.message_events(message=self._message(), deltas=self.pieces, ping=True)
        return [_event(event["type"], event) for event in events]

    def error_event(self, *, sequence_number: int, message: str = "The upstream failed mid-stream.") -> bytes:
        if self.path == CHAT:
            return _data({"error": {"message": message, "type": "server_error", "param": None, "code": None}})
        if self.path == RESPONSES:
            event = {"type": "error", "code": "server_error", "message": message, "param": None}
            return _event("error", {**event, "sequence_number": sequence_number})
        return _event("error", {"type": "error", "error": {"type": "overloaded_error", "message": message}})

    # The families' shapes (upstreams/text_shapes.py), with this answer's ids and counts

    def _said(self) -> text_shapes.Answer:
        c = self.counts
        return text_shapes.Answer(
            tag=f"fake{self.n:06d}",
            created=self.created,
            model=self.model,
            text=self.text,
            truncated=self.truncated,
            input_tokens=c.input,
            output_tokens=c.output,
            cached_tokens=c.cached,
            cache_write_tokens=c.cache_creation,
            reasoning_tokens=c.reasoning,
        )

    def _chat_completion(self) -> dict[str, Any]:
        return text_shapes.chat_completion(self._said())

    def _response(self) -> dict[str, Any]:
        return text_shapes.response_object(
            self._said(),
            instructions=self.payload.get("instructions"),
            max_output_tokens=self.payload.get("max_output_tokens"),
        )

    def _message(self) -> dict[str, Any]:
        return text_shapes.message_object(self._said())


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
