"""The text endpoints of the fake upstream (tests/fake_upstream.py serves them): answers in the wire
formats the official SDKs parse, built from the request alone so that tests can predict them.

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

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
TEXT_PATHS = (CHAT, RESPONSES, MESSAGES, COUNT_TOKENS)
ANTHROPIC_PATHS = (MESSAGES, COUNT_TOKENS)

DONE = "[DONE]"
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
            cache_creation=_number(answer, "cache_creation_tokens", headers, "x-fake-cache-creation"),
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
            return self._response("completed" if not self.truncated else "incomplete", self._output())
        if self.path == MESSAGES:
            return self._message(content=[{"type": "text", "text": self.text}], final=True)
        return {"input_tokens": self.counts.input}

    def events(self) -> list[bytes]:
        """Every event of the stream, the final one last."""
        if self.path == CHAT:
            return [_data(e) for e in self._chat_chunks()] + [f"data: {DONE}\n\n".encode()]
        if self.path == RESPONSES:
            return [_event(e["type"], e) for e in self._response_events()]
        return [_event(e["type"], e) for e in self._message_events()]

    def error_event(self, *, sequence_number: int, message: str = "The upstream failed mid-stream.") -> bytes:
        if self.path == CHAT:
            return _data({"error": {"message": message, "type": "server_error", "param": None, "code": None}})
        if self.path == RESPONSES:
            event = {"type": "error", "code": "server_error", "message": message, "param": None}
            return _event("error", {**event, "sequence_number": sequence_number})
        return _event("error", {"type": "error", "error": {"type": "overloaded_error", "message": message}})

    # OpenAI chat completions

    def _chat_usage(self) -> dict[str, Any]:
        c = self.counts
        return {
            "prompt_tokens": c.input,
            "completion_tokens": c.output,
            "total_tokens": c.input + c.output,
            "prompt_tokens_details": {"cached_tokens": c.cached, "cache_write_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": c.reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def _chat_base(self, kind: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake{self.n:06d}",
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "service_tier": "default",
        }

    def _finish_reason(self) -> str:
        return "length" if self.truncated else "stop"

    def _chat_completion(self) -> dict[str, Any]:
        message = {"role": "assistant", "content": self.text, "refusal": None, "annotations": []}
        return {
            **self._chat_base("chat.completion"),
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": self._finish_reason()}
            ],
            "usage": self._chat_usage(),
        }

    def _chat_chunks(self) -> list[dict[str, Any]]:
        options = self.payload.get("stream_options") or {}
        with_usage = options.get("include_usage") is True
        # Asked for usage, the provider puts "usage": null on every chunk before the usage-only one.
        extra = {"usage": None} if with_usage else {}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**self._chat_base("chat.completion.chunk"), "choices": [choice], **extra}

        chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
        chunks += [chunk({"content": piece}) for piece in self.pieces]
        chunks.append(chunk({}, self._finish_reason()))
        if with_usage:
            chunks.append(
                {**self._chat_base("chat.completion.chunk"), "choices": [], "usage": self._chat_usage()}
            )
        return chunks

    # OpenAI responses

    def _responses_usage(self) -> dict[str, Any]:
        c = self.counts
        return {
            "input_tokens": c.input,
            "input_tokens_details": {"cached_tokens": c.cached, "cache_write_tokens": 0},
            "output_tokens": c.output,
            "output_tokens_details": {"reasoning_tokens": c.reasoning},
            "total_tokens": c.input + c.output,
        }

    def _text_part(self, text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _message_item(self, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"msg_fake{self.n:06d}",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _output(self) -> list[dict[str, Any]]:
        status = "incomplete" if self.truncated else "completed"
        return [self._message_item(status, [self._text_part(self.text)])]

    def _response(self, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        finished = status in ("completed", "incomplete")
        return {
            "id": f"resp_fake{self.n:06d}",
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": self.payload.get("instructions"),
            "max_output_tokens": self.payload.get("max_output_tokens"),
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "store": True,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": self._responses_usage() if finished else None,
            "user": None,
            "metadata": {},
        }

    def _response_events(self) -> list[dict[str, Any]]:
        item_id = f"msg_fake{self.n:06d}"
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        final = self._response("incomplete" if self.truncated else "completed", self._output())
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": self._response("in_progress", [])},
            {"type": "response.in_progress", "response": self._response("in_progress", [])},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": self._message_item("in_progress", []),
            },
            {"type": "response.content_part.added", **where, "part": self._text_part("")},
        ]
        events += [
            {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            for piece in self.pieces
        ]
        events += [
            {"type": "response.output_text.done", **where, "text": self.text, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": self._text_part(self.text)},
            {"type": "response.output_item.done", "output_index": 0, "item": final["output"][0]},
            {"type": "response.incomplete" if self.truncated else "response.completed", "response": final},
        ]
        return [{**event, "sequence_number": number} for number, event in enumerate(events)]

    # Anthropic messages

    def _message_usage(self, output_tokens: int) -> dict[str, Any]:
        c = self.counts
        return {
            "input_tokens": c.input,
            "cache_creation_input_tokens": c.cache_creation,
            "cache_read_input_tokens": c.cached,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def _stop_reason(self) -> str:
        return "max_tokens" if self.truncated else "end_turn"

    def _message(self, *, content: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        return {
            "id": f"msg_fake{self.n:06d}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self._stop_reason() if final else None,
            "stop_sequence": None,
            "usage": self._message_usage(self.counts.output if final else 1),
        }

    def _message_events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": self._message(content=[], final=False)},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "ping"},
        ]
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
            for piece in self.pieces
        ]
        events += [
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop_reason(), "stop_sequence": None},
                "usage": {"output_tokens": self.counts.output},
            },
            {"type": "message_stop"},
        ]
        return events


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
