"""The adapter interface every upstream kind implements.

An adapter turns one operation's request into its result for one upstream, or raises `UpstreamError`,
which says whether retrying can help. Each kind declares the operations it serves (`operations`); the
registry (`upstreams.providers`) answers which kinds serve an operation, and asking an adapter for one
it does not serve is a non-retryable `UpstreamError`. Its HTTP calls go through `upstreams.transport`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from django.utils import timezone

from upstreams.errors import UpstreamError, UpstreamMisconfigured
from upstreams.sse import SSE_READ_BYTES, SSEDirect, SSEEvent, SSEParser, sse_events
from upstreams.transport import UpstreamReply, upstream_request

if TYPE_CHECKING:
    from upstreams.snapshots import UpstreamSnapshot

__all__ = [
    "CHAT_COMPLETIONS",
    "GEMINI_COUNT_TOKENS",
    "GEMINI_GENERATE",
    "IMAGES_EDIT",
    "IMAGES_GENERATE",
    "IMAGES_STREAM",
    "MESSAGES",
    "MESSAGES_COUNT_TOKENS",
    "RESPONSES",
    "TEXT_OPERATIONS",
    "Adapter",
    "ImageItem",
    "ImageRequest",
    "ImageResult",
    "SSEEvent",
    "StreamEvent",
    "TextReply",
    "TextRequest",
    "UpstreamError",
    "stream_event_names",
]

logger = logging.getLogger("gateway.upstream")

# Operation names: "<family>.<action>".
IMAGES_GENERATE = "images.generate"
IMAGES_EDIT = "images.edit"
IMAGES_STREAM = "images.stream"
CHAT_COMPLETIONS = "chat.completions"
RESPONSES = "responses"
MESSAGES = "messages"
MESSAGES_COUNT_TOKENS = "messages.count_tokens"
TEXT_OPERATIONS = (CHAT_COMPLETIONS, RESPONSES, MESSAGES, MESSAGES_COUNT_TOKENS)
# Google's generateContent for text (streamed as streamGenerateContent): no endpoint of the gateway
# speaks it; callers reach it through a translator.
GEMINI_GENERATE = "gemini.generate_content"
GEMINI_COUNT_TOKENS = "gemini.count_tokens"

# An error body is kept whole when it is JSON, else this much of its text.
ERROR_BODY_LIMIT = 4000
# The longest wait an upstream's Retry-After is taken as (it may say any number, or a date years away).
RETRY_AFTER_MAX_SECONDS = 86_400.0
EVENT_STREAM = "text/event-stream"
USER_AGENT = "image-gateway/0.1"


@dataclass(frozen=True)
class ImageRequest:
    operation: Literal["generate", "edit"]
    upstream_model: str
    prompt: str
    n: int = 1
    size: str | None = None
    output_format: str | None = None
    response_format: str = "b64_json"
    # Other validated, spec-listed fields (quality, style, background, output_compression, ...).
    options: dict[str, Any] = field(default_factory=dict)
    images: tuple[bytes, ...] = ()
    mask: bytes | None = None
    request_id: str = ""

    @property
    def upstream_operation(self) -> str:
        """The adapter operation that answers this request without streaming."""
        return IMAGES_GENERATE if self.operation == "generate" else IMAGES_EDIT


@dataclass(frozen=True)
class ImageItem:
    b64_json: str | None = None
    url: str | None = None
    revised_prompt: str | None = None


@dataclass(frozen=True)
class ImageResult:
    created: int
    items: tuple[ImageItem, ...]
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class StreamEvent:
    """One server-sent event of a streamed image call, as the upstream sent it.

    `type` is e.g. "image_generation.partial_image" or "image_edit.completed"; `data` is the event's
    JSON object; `final` marks a completed image (the call is billed once every image completed)."""

    type: str
    data: dict[str, Any]
    final: bool = False


@dataclass(frozen=True)
class TextRequest:
    """A text family's call, as the endpoint app has prepared it.

    `body` is the JSON to send, already encoded (model replaced, stream options set); it goes out byte
    for byte. `stream` asks for an event stream. `headers` are the caller's headers to forward
    (lowercase names; only "anthropic-version" and "anthropic-beta" are ever given). `model` is the
    upstream's name for the model, for a kind whose address names it (Gemini's)."""

    operation: str
    body: bytes
    stream: bool
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str = ""
    model: str = ""


class TextReply:
    """An upstream's answer to a text call: a 2xx, or a 4xx about the request that the caller gets in
    the upstream's own shape.

    `body` is the whole body, unless the answer is a streamed 2xx: then `events` yields its events as
    they arrive (a read failure raises UpstreamError with `outcome_unknown`; the iterator ends where the
    upstream's body ends). `close` gives the connection back, or drops it if the stream was not read to
    its end; it is safe to call twice, and the events iterator calls it when exhausted or closed.

    `skim`, which a reader of `events` may set at any time, is the `skim` of upstreams.sse.sse_events
    for the reads still to come (an adapter whose events are not read through it ignores it).

    `direct()` gives the rest of a streamed reply's events to a reader that waits for many streams at
    once (api/stream_loop.py), when the adapter reads them straight off the upstream's connection.
    """

    def __init__(
        self,
        *,
        status: int,
        content_type: str,
        body: bytes = b"",
        events: Iterator[SSEEvent] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.status = status
        self.content_type = content_type
        self.body = body
        self.events = events
        self._skim: Callable[[bytes], bool] | None = None
        self._on_close = on_close
        self._direct: tuple[UpstreamReply, SSEParser] | None = None

    @property
    def skim(self) -> Callable[[bytes], bool] | None:
        return self._skim

    @skim.setter
    def skim(self, skim: Callable[[bytes], bool] | None) -> None:
        # Handed to the parser itself, not asked through a method of this reply: the parser would
        # then refer back to the reply, and a finished stream's reply, its parser, its events and
        # its connection objects would wait for the cyclic garbage collector's next full pass
        # instead of being freed as soon as the stream lets go of them.
        self._skim = skim
        if self._direct is not None:
            self._direct[1].skim = skim

    def events_read_from(self, reply: UpstreamReply) -> None:
        """Take `events` from a streamed upstream reply's event stream, keep-alive comments included
        (chat/streaming.py relays them), through a parser that `direct` can hand on."""
        parser = SSEParser(comments=True, skim=self._skim)
        self.events = _events_then_close(reply, parser=parser)
        self._direct = (reply, parser)

    def direct(self) -> SSEDirect | None:
        """The rest of the events read without waiting (upstreams.sse.SSEDirect), or None when they
        cannot be (an adapter that makes its events, a body that is not chunked). Only between two
        reads: once `events` has yielded an event whose `more` is False. `events` may read on after."""
        if self._direct is None:
            return None
        reply, parser = self._direct
        body = reply.direct(SSE_READ_BYTES)
        return None if body is None else SSEDirect(body, parser)

    def end_await(self, timeout: float) -> None:
        """After the stream's final event: wait up to `timeout` seconds for the end of the upstream's
        body, which providers send right after it, so that `close` gives the connection back to the
        pool instead of dropping it (upstreams/chunked.py). Nothing when the adapter makes the events."""
        if self._direct is not None:
            self._direct[0].end_await(timeout)

    def close(self) -> None:
        events, on_close, self._on_close = self.events, self._on_close, None
        if isinstance(events, Generator):
            events.close()
        if on_close is not None:
            on_close()

    def __enter__(self) -> TextReply:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def stream_event_names(operation: str) -> tuple[str, str]:
    """(partial, completed) event types for an operation, as OpenAI's Images API names them."""
    prefix = "image_generation" if operation == "generate" else "image_edit"
    return f"{prefix}.partial_image", f"{prefix}.completed"


class Adapter:
    """Base class of the upstream adapters; one instance per upstream per call.

    A kind lists the operations it serves in `operations` and implements each: the image operations
    as `generate`, `edit` and `stream`; any other (a text family's) in `serve`, which `call` hands
    every operation not in `IMAGE_METHODS`.
    """

    kind: ClassVar[str]
    operations: ClassVar[frozenset[str]] = frozenset()
    IMAGE_METHODS: ClassVar[Mapping[str, str]] = {
        IMAGES_GENERATE: "generate",
        IMAGES_EDIT: "edit",
        IMAGES_STREAM: "stream",
    }

    def __init__(self, upstream: UpstreamSnapshot, *, deadline: float | None = None) -> None:
        self.upstream = upstream
        # Absolute time.monotonic() by which the whole call must end (set by the retry loop).
        self.deadline = deadline

    @classmethod
    def serves(cls, operation: str) -> bool:
        return operation in cls.operations

    def call(self, operation: str, request: Any) -> Any:
        """Run `operation` on this upstream; a non-retryable UpstreamError if the kind does not serve it."""
        self.operation_check(operation)
        method = self.IMAGE_METHODS.get(operation)
        if method is not None:
            return getattr(self, method)(request)
        return self.serve(operation, request)

    def image_call(self, request: ImageRequest) -> ImageResult:
        """Generate or edit, as the request says (not streamed)."""
        result: ImageResult = self.call(request.upstream_operation, request)
        return result

    def operation_check(self, operation: str) -> None:
        if operation not in self.operations:
            raise UpstreamError(
                f"{self.kind} upstreams do not serve {operation}", status=None, retryable=False
            )

    def serve(self, operation: str, request: Any) -> Any:
        """The operations beyond the image ones; a kind that declares any implements them here."""
        self.operation_check(operation)
        raise NotImplementedError(f"{type(self).__name__} declares {operation} but does not serve it")

    def generate(self, request: ImageRequest) -> ImageResult:
        self.operation_check(IMAGES_GENERATE)
        raise NotImplementedError

    def edit(self, request: ImageRequest) -> ImageResult:
        self.operation_check(IMAGES_EDIT)
        raise NotImplementedError

    def stream(self, request: ImageRequest) -> Iterator[StreamEvent]:
        """Partial and completed images as they arrive; raises UpstreamError before or during the stream."""
        self.operation_check(IMAGES_STREAM)
        raise NotImplementedError

    def _request(self, method: str, url: str, **kwargs: Any) -> UpstreamReply:
        """An HTTP call to this upstream within the call's deadline (`upstreams.transport`)."""
        return upstream_request(
            upstream=self.upstream, method=method, url=url, deadline=self.deadline, **kwargs
        )

    def _url(self, path: str) -> str:
        return f"{self.upstream.base_url.rstrip('/')}/{path}"

    def _api_key(self) -> str:
        """The provider key from the environment variable the upstream names; an upstream without one
        is misconfigured (the value is never logged, only the variable's name)."""
        env_name = self.upstream.api_key_env
        key = os.environ.get(env_name, "").strip() if env_name else ""
        if not key:
            logger.error(
                "upstream %s: the environment variable %s holding its API key is %s",
                self.upstream.name,
                env_name or "(none configured)",
                "empty or unset" if env_name else "not configured",
            )
            raise UpstreamMisconfigured(
                f"upstream {self.upstream.name}: API key variable {env_name or '(none)'} is not set"
            )
        return key

    def _text_exchange(self, url: str, request: TextRequest, *, headers: dict[str, str]) -> TextReply:
        """POST a text request's body as it is and answer by the rules every kind shares.

        A 2xx is the reply (a streamed one must be an event stream); any other 4xx but 401, 403 and 429
        is the reply too, its body read whole, for the caller to get as the upstream said it. Anything
        else is the UpstreamError for its status (`reply_error`).
        """
        reply = self._request("POST", url, data=request.body, headers=headers, stream=request.stream)
        streaming = False
        try:
            status = reply.status
            content_type = reply.headers.get("Content-Type", "")
            if request.stream and 200 <= status < 300:
                if EVENT_STREAM not in content_type.lower():
                    raise UpstreamError(
                        "upstream did not answer with an event stream", status=502, retryable=True, sent=True
                    )
                streaming = True
                text = TextReply(status=status, content_type=content_type, on_close=reply.close)
                text.events_read_from(reply)
                return text
            if request.stream:
                reply.read()
            if 200 <= status < 300 or (400 <= status < 500 and status not in (401, 403, 429)):
                return TextReply(status=status, content_type=content_type, body=reply.body_take())
            raise reply_error(reply)
        finally:
            if not streaming:
                reply.close()


def _events_then_close(reply: UpstreamReply, *, parser: SSEParser) -> Iterator[SSEEvent]:
    """A text stream's events, its keep-alive comments included (chat/streaming.py relays them)."""
    try:
        yield from sse_events(reply, parser=parser)
    finally:
        reply.close()


def reply_error(reply: UpstreamReply) -> UpstreamError:
    """The UpstreamError for an answer that is not a success: 429 and 5xx (Anthropic's 529 included)
    are retryable, anything else is not; each carries the upstream's error body."""
    status = reply.status
    body = reply_error_body(reply)
    if status == 429:
        return UpstreamError(
            "upstream rate limited the request",
            status=429,
            retryable=True,
            body=body,
            sent=True,
            retry_after=reply_retry_after(reply),
        )
    if status >= 500:
        return UpstreamError(
            f"upstream failed with HTTP {status}", status=status, retryable=True, body=body, sent=True
        )
    return UpstreamError(
        f"upstream refused the request with HTTP {status}",
        status=status,
        retryable=False,
        body=body,
        sent=True,
    )


def reply_error_body(reply: UpstreamReply) -> Any:
    """The upstream's error body: parsed JSON when it is JSON, else a bounded piece of its text."""
    try:
        return reply.json()
    except ValueError:
        return reply.text()[:ERROR_BODY_LIMIT]


def reply_retry_after(reply: UpstreamReply) -> float | None:
    """The Retry-After header in seconds (it may be a date), at most RETRY_AFTER_MAX_SECONDS, or None
    (absent, unreadable, or not a finite number)."""
    value = reply.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - timezone.now()).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), RETRY_AFTER_MAX_SECONDS)
