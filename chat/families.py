"""The four text endpoints and what differs between them: the upstream operation, the error shape,
the field that limits output, the fields that name a conversation, where the upstream reports usage,
and which stream event ends a call.

Everything else (authentication, access, limits, holds, retries, relaying) is the same for all four
and lives in chat/pipeline.py and chat/streaming.py.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from billing.usage import TokenCounts
from chat.output_count import CHAT_OUTPUT, GEMINI_OUTPUT, MESSAGES_OUTPUT, RESPONSES_OUTPUT, ReceivedOutput
from core.errors import Shape
from upstreams.providers.base import (
    CHAT_COMPLETIONS,
    GEMINI_COUNT_TOKENS,
    GEMINI_GENERATE,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    RESPONSES,
    SSEEvent,
)


def _count(value: Any) -> int:
    """A token count as the upstream reported it; anything that is not a non-negative integer is 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def openai_chat_tokens(usage: Any) -> TokenCounts | None:
    """`usage` of a chat completion: prompt tokens (cached ones among them) and completion tokens
    (reasoning tokens among them)."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    cached = min(_count(_mapping(usage.get("prompt_tokens_details")).get("cached_tokens")), prompt)
    return TokenCounts(input=prompt - cached, cached=cached, output=_count(usage.get("completion_tokens")))


def openai_responses_tokens(usage: Any) -> TokenCounts | None:
    """`usage` of a response: input tokens (cached ones among them) and output tokens."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("input_tokens"))
    cached = min(_count(_mapping(usage.get("input_tokens_details")).get("cached_tokens")), prompt)
    return TokenCounts(input=prompt - cached, cached=cached, output=_count(usage.get("output_tokens")))


def gemini_tokens(usage: Any) -> TokenCounts | None:
    """Gemini's `usageMetadata`: prompt tokens (cached ones among them); candidates' and thoughts'
    tokens, both billed as output."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("promptTokenCount"))
    cached = min(_count(usage.get("cachedContentTokenCount")), prompt)
    output = _count(usage.get("candidatesTokenCount")) + _count(usage.get("thoughtsTokenCount"))
    return TokenCounts(input=prompt - cached, cached=cached, output=output)


def anthropic_tokens(usage: Any, *, before: TokenCounts | None = None) -> TokenCounts | None:
    """`usage` of a message: input tokens exclude the cache reads and writes, which come apart. In a
    stream, `message_delta` repeats only what changed: fields it leaves out keep `before`'s."""
    if not isinstance(usage, dict):
        return before
    base = before or TokenCounts()

    def pick(field: str, current: int) -> int:
        return _count(usage[field]) if field in usage and usage[field] is not None else current

    return TokenCounts(
        input=pick("input_tokens", base.input),
        cached=pick("cache_read_input_tokens", base.cached),
        cache_write=pick("cache_creation_input_tokens", base.cache_write),
        output=pick("output_tokens", base.output),
        cache_write_1h=_one_hour_writes(usage, base.cache_write_1h),
    )


def _one_hour_writes(usage: Mapping[str, Any], current: int) -> int:
    """Anthropic's `cache_creation.ephemeral_1h_input_tokens`: the cache writes to a one-hour cache."""
    creation = usage.get("cache_creation")
    if isinstance(creation, dict) and "ephemeral_1h_input_tokens" in creation:
        return _count(creation["ephemeral_1h_input_tokens"])
    return current


class StreamTracker(ABC):
    """Follows one family's event stream: what to relay, the usage reported, whether the call's final
    event has arrived, and whether the upstream reported an error inside the stream.

    Most events of a stream are text deltas that say nothing of usage, the end or an error; a tracker
    decides that from the event's name or a search of its text and parses only the others. The
    searches look for a JSON key outside any string (inside a string its quotes would be escaped).

    `received` keeps the generated strings of every event read (the relay hands it each one's raw
    bytes), counted only when the caller leaves before the final event (chat/output_count.py)."""

    OUTPUT: re.Pattern[bytes]  # the family's generated strings, for `received`

    def __init__(self, *, usage_asked: bool) -> None:
        self.usage_asked = usage_asked
        self.tokens: TokenCounts | None = None
        # The upstream has reported the output it bills (not only the input, as a stream's start does).
        self.output_reported = False
        self.complete = False
        self.error: Any = None  # the upstream's error payload, when it sent one mid-stream
        self.received = ReceivedOutput(self.OUTPUT)

    @property
    def next_sequence(self) -> int:
        """The `sequence_number` of an event the gateway adds (an error), in families that number them."""
        return 0

    @abstractmethod
    def feed(self, event: SSEEvent) -> bool:
        """Take one event; True when it is to be relayed to the caller."""

    def skim(self, whole: bytes) -> bool:
        """True when `whole`, some whole events as they arrived (line ends "\\n"), holds nothing this
        tracker follows: `feed` would relay each and note nothing. The relay then passes them on
        unparsed (upstreams.sse.sse_events' `skim`). The checks are plain searches of the bytes, and
        any doubt answers False: the events are then fed one by one."""
        return False

    def ended(self) -> None:  # noqa: B027 - optional hook: most families need no end-of-body rule
        """The upstream's body ended (cleanly); a family may accept that as the end of the call."""

    @staticmethod
    def _json(event: SSEEvent) -> Any:
        try:
            return json.loads(event.data)
        except ValueError:
            return None


# A chat chunk worth parsing: it has an error, a usage object, or a finish_reason that is not null.
_CHAT_NOTABLE = re.compile(r'"error"|"(?:usage|finish_reason)"\s*:\s*[^\sn]')
_SEQUENCE_NUMBER = re.compile(r'"sequence_number"\s*:\s*(\d+)')
# Named events of one data line each, none of them one that the tracker follows (`skim`).
_MESSAGES_PLAIN = re.compile(rb"(?:event: (?!message_|error)[^\n]+\ndata: [^\n]*\n\n)+")
_RESPONSES_PLAIN = re.compile(
    rb"(?:event: (?!error|response\.(?:failed|completed|incomplete))[^\n]+\ndata: [^\n]*\n\n)+"
)


class ChatCompletionsTracker(StreamTracker):
    """`data: {chunk}` events, then `data: [DONE]`. The gateway always asks for usage
    (`stream_options.include_usage`); the usage-only chunk (empty `choices`) is relayed only to a
    caller who asked for it, since `chunk.choices[0]` fails on it."""

    OUTPUT = CHAT_OUTPUT

    def __init__(self, *, usage_asked: bool) -> None:
        super().__init__(usage_asked=usage_asked)
        self.finished = False  # a choice reported its finish_reason

    def feed(self, event: SSEEvent) -> bool:
        data = event.data
        if _CHAT_NOTABLE.search(data) is None:
            if data.strip() == "[DONE]":
                self.complete = True
            return True
        chunk = self._json(event)
        if not isinstance(chunk, dict):
            return True
        if chunk.get("error"):
            self.error = chunk["error"]
            return False
        choices = chunk.get("choices")
        if isinstance(choices, list):
            self.finished = self.finished or any(
                isinstance(choice, dict) and choice.get("finish_reason") for choice in choices
            )
        tokens = openai_chat_tokens(chunk.get("usage"))
        if tokens is not None:
            self.tokens = tokens
            self.output_reported = True
            if not choices:
                return self.usage_asked
        return True

    def skim(self, whole: bytes) -> bool:
        # Events of one `data: ` line each: the line ends are two per event and all of them are those
        # of an event's end, each but the last followed by the next event's `data: `. Then none may
        # hold an error or `[DONE]`, and every usage and finish_reason must be null, as compact JSON
        # has them (the upstream sends `"usage":null` on each chunk before the usage-only one).
        return (
            whole.startswith(b"data: ")
            and whole.count(b"\n") == 2 * (whole.count(b"\n\ndata: ") + 1)
            and b'"error"' not in whole
            and b"[DONE]" not in whole
            and whole.count(b'"usage"') == whole.count(b'"usage":null')
            and whole.count(b'"finish_reason"') == whole.count(b'"finish_reason":null')
        )

    def ended(self) -> None:
        # Some compatible upstreams end the body without `[DONE]`: a stream that finished and
        # reported its usage is complete all the same.
        if self.finished and self.tokens is not None:
            self.complete = True


class ResponsesTracker(StreamTracker):
    """Named events; usage in `response.completed` (or `response.incomplete`, which the upstream
    bills too, e.g. when `max_output_tokens` ran out); `response.failed` and `error` are failures."""

    OUTPUT = RESPONSES_OUTPUT
    FINAL = ("response.completed", "response.incomplete")
    NOTABLE = frozenset({"", "error", "response.failed", *FINAL})

    def __init__(self, *, usage_asked: bool) -> None:
        super().__init__(usage_asked=usage_asked)
        # The last event's data (or, after a skim, the whole last event), for the sequence number
        # that follows it.
        self._last_data: str | bytes = ""

    @property
    def next_sequence(self) -> int:
        last = self._last_data
        match = _SEQUENCE_NUMBER.search(last if isinstance(last, str) else last.decode("utf-8", "replace"))
        return int(match.group(1)) + 1 if match else 0

    def skim(self, whole: bytes) -> bool:
        if _RESPONSES_PLAIN.fullmatch(whole) is None:
            return False
        cut = whole.rfind(b"\n\n", 0, len(whole) - 2)
        self._last_data = whole[cut + 2 :] if cut >= 0 else whole
        return True

    def feed(self, event: SSEEvent) -> bool:
        kind = event.event
        if kind not in self.NOTABLE:
            self._last_data = event.data
            return True
        payload = self._json(event)
        if isinstance(payload, dict) and isinstance(payload.get("sequence_number"), int):
            self._last_data = event.data
        if not kind and isinstance(payload, dict):
            kind = str(payload.get("type") or "")
        if kind in ("error", "response.failed"):
            self.error = payload if payload is not None else event.data
            return False
        if kind in self.FINAL and isinstance(payload, dict):
            self.tokens = openai_responses_tokens(_mapping(payload.get("response")).get("usage"))
            self.output_reported = self.tokens is not None
            self.complete = True
        return True


class MessagesTracker(StreamTracker):
    """Named events: input usage in `message_start`, output usage in `message_delta` (cumulative),
    `message_stop` ends the call; an `error` event is a failure."""

    OUTPUT = MESSAGES_OUTPUT
    NOTABLE = frozenset({"", "error", "message_start", "message_delta"})

    def skim(self, whole: bytes) -> bool:
        return _MESSAGES_PLAIN.fullmatch(whole) is not None

    def feed(self, event: SSEEvent) -> bool:
        kind = event.event
        if kind not in self.NOTABLE:
            if kind == "message_stop":
                self.complete = True
            return True
        payload = self._json(event)
        if not kind and isinstance(payload, dict):
            kind = str(payload.get("type") or "")
        if kind == "error":
            self.error = payload if payload is not None else event.data
            return False
        if kind == "message_start" and isinstance(payload, dict):
            self.tokens = anthropic_tokens(_mapping(payload.get("message")).get("usage"), before=self.tokens)
        elif kind == "message_delta" and isinstance(payload, dict):
            self.tokens = anthropic_tokens(payload.get("usage"), before=self.tokens)
            self.output_reported = self.output_reported or isinstance(payload.get("usage"), dict)
        elif kind == "message_stop":
            self.complete = True
        return True


class GeminiTracker(StreamTracker):
    """streamGenerateContent's events: generateContent answers, `usageMetadata` on the way (cumulative),
    the one with a candidate's `finishReason` ends the call; an `error` object is a failure. The
    stream has no end marker of its own."""

    OUTPUT = GEMINI_OUTPUT

    def feed(self, event: SSEEvent) -> bool:
        payload = self._json(event)
        if not isinstance(payload, dict):
            return True
        if payload.get("error"):
            self.error = payload["error"]
            return False
        tokens = gemini_tokens(payload.get("usageMetadata"))
        if tokens is not None:
            self.tokens = tokens
            self.output_reported = True
        candidates = payload.get("candidates")
        if isinstance(candidates, list) and any(
            isinstance(candidate, dict) and candidate.get("finishReason") for candidate in candidates
        ):
            self.complete = True
        return True


# The other shapes of an upstream's 4xx body that a family's callers get as it is, besides their own
# (a compatible provider may answer Google's); any other shape is rebuilt in the family's.
PASSED_ERROR_SHAPES: dict[Shape, tuple[Shape, ...]] = {"compatible": ("google",), "native": (), "google": ()}


@dataclass(frozen=True)
class Family:
    """One text endpoint."""

    endpoint: str  # also the usage records' `endpoint` and the adapter operation
    path: str
    shape: Shape  # the body shape of the gateway's own errors on this endpoint
    limit_fields: tuple[str, ...]  # the output-token limit, as this family names it
    billed: bool
    streams: bool
    tokens_of: Callable[[Any], TokenCounts | None]  # from a non-streamed answer's JSON
    tracker: type[StreamTracker] | None
    # Whether the family's API takes an image by link; else the gateway sends its bytes (chat/image_links.py).
    takes_image_links: bool = True
    # Whether its bodies hold images as untyped parts with their bytes (Gemini's
    # `contents[].parts[].inlineData`), which the input ceiling counts as images (chat/validation.py).
    inline_image_parts: bool = False
    # Where a body names its conversation, first found first (a path of keys each): the key of
    # cache-aware routing (upstreams/affinity.py).
    conversation_fields: tuple[tuple[str, ...], ...] = ()

    @property
    def operation(self) -> str:
        return self.endpoint

    def conversation_key(self, body: Mapping[str, Any]) -> str | None:
        """The conversation the body names: the first of the family's conversation fields that holds
        a non-empty string (any other value names none)."""
        for path in self.conversation_fields:
            value: Any = body
            for name in path:
                value = value.get(name) if isinstance(value, dict) else None
            if isinstance(value, str) and value:
                return value
        return None


def _usage_of(key: str, extract: Callable[[Any], TokenCounts | None]) -> Callable[[Any], TokenCounts | None]:
    def tokens_of(payload: Any) -> TokenCounts | None:
        return extract(payload.get(key)) if isinstance(payload, dict) else None

    return tokens_of


CHAT = Family(
    endpoint=CHAT_COMPLETIONS,
    path="/v1/chat/completions",
    shape="compatible",
    limit_fields=("max_completion_tokens", "max_tokens"),
    billed=True,
    streams=True,
    tokens_of=_usage_of("usage", openai_chat_tokens),
    tracker=ChatCompletionsTracker,
    conversation_fields=(("prompt_cache_key",), ("user",)),
)
RESPONSES_FAMILY = Family(
    endpoint=RESPONSES,
    path="/v1/responses",
    shape="compatible",
    limit_fields=("max_output_tokens",),
    billed=True,
    streams=True,
    tokens_of=_usage_of("usage", openai_responses_tokens),
    tracker=ResponsesTracker,
    conversation_fields=(("prompt_cache_key",), ("user",)),
)
MESSAGES_FAMILY = Family(
    endpoint=MESSAGES,
    path="/v1/messages",
    shape="native",
    limit_fields=("max_tokens",),
    billed=True,
    streams=True,
    tokens_of=_usage_of("usage", anthropic_tokens),
    tracker=MessagesTracker,
    # Claude Code sends one per session.
    conversation_fields=(("metadata", "user_id"),),
)
COUNT_TOKENS = Family(
    endpoint=MESSAGES_COUNT_TOKENS,
    path="/v1/messages/count_tokens",
    shape="native",
    limit_fields=(),
    billed=False,
    streams=False,
    tokens_of=lambda payload: None,
    tracker=None,
)
# Gemini's generateContent: a family upstreams speak, reached only through a translator (no endpoint).
GEMINI_FAMILY = Family(
    endpoint=GEMINI_GENERATE,
    path="",
    shape="google",
    limit_fields=(),
    billed=True,
    streams=True,
    tokens_of=_usage_of("usageMetadata", gemini_tokens),
    tracker=GeminiTracker,
    takes_image_links=False,
    inline_image_parts=True,
)
# Gemini's countTokens, reached from /v1/messages/count_tokens through its translator.
GEMINI_COUNT_FAMILY = Family(
    endpoint=GEMINI_COUNT_TOKENS,
    path="",
    shape="google",
    limit_fields=(),
    billed=False,
    streams=False,
    tokens_of=lambda payload: None,
    tracker=None,
    takes_image_links=False,
    inline_image_parts=True,
)
FAMILIES: tuple[Family, ...] = (CHAT, RESPONSES_FAMILY, MESSAGES_FAMILY, COUNT_TOKENS)
FAMILY_BY_OPERATION: dict[str, Family] = {family.operation: family for family in FAMILIES}
