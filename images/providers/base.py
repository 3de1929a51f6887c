"""The adapter interface every upstream kind implements, and the one HTTP path they all use.

Adapters turn an `ImageRequest` into an `ImageResult` or raise `UpstreamError`, which says whether
retrying can help. Every HTTP call to a provider goes through `Adapter._request`, on one pooled
`requests.Session` per upstream, with explicit connect and read timeouts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NameResolutionError, NewConnectionError

if TYPE_CHECKING:
    from images.models import Upstream

CONNECT_TIMEOUT_SECONDS = 5.0
POOL_SIZE = 64  # >= a worker's threads, so no thread waits for a pooled connection


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


def stream_event_names(operation: str) -> tuple[str, str]:
    """(partial, completed) event types for an operation, as OpenAI's Images API names them."""
    prefix = "image_generation" if operation == "generate" else "image_edit"
    return f"{prefix}.partial_image", f"{prefix}.completed"


class UpstreamError(Exception):
    """A failed upstream call. `retryable` says whether another attempt (or upstream) may succeed;
    `sent` says whether the request reached the provider. `outcome_unknown` says the request went out
    but no answer came back (read timeout, connection dropped mid-answer): the provider may have made,
    and billed, the image, so the call must never be repeated blindly."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        retryable: bool,
        body: Any = None,
        sent: bool = False,
        retry_after: float | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.body = body
        self.sent = sent or outcome_unknown
        self.retry_after = retry_after
        self.outcome_unknown = outcome_unknown


_sessions: dict[int, requests.Session] = {}
_sessions_lock = threading.Lock()


def session_for(upstream_id: int) -> requests.Session:
    """One pooled session per upstream per process, shared by the worker's threads."""
    session = _sessions.get(upstream_id)
    if session is None:
        with _sessions_lock:
            session = _sessions.get(upstream_id)
            if session is None:
                session = requests.Session()
                adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE, max_retries=0)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
                _sessions[upstream_id] = session
    return session


class Adapter:
    """Base class of the upstream adapters; one instance per upstream per call."""

    kind: ClassVar[str]

    def __init__(self, upstream: Upstream, *, deadline: float | None = None) -> None:
        self.upstream = upstream
        # Absolute time.monotonic() by which the whole call must end (set by the retry loop).
        self.deadline = deadline

    def generate(self, request: ImageRequest) -> ImageResult:
        raise UpstreamError(f"{self.kind} upstreams cannot generate images", status=None, retryable=False)

    def edit(self, request: ImageRequest) -> ImageResult:
        raise UpstreamError(f"{self.kind} upstreams cannot edit images", status=None, retryable=False)

    def call(self, request: ImageRequest) -> ImageResult:
        return self.generate(request) if request.operation == "generate" else self.edit(request)

    def stream(self, request: ImageRequest) -> Iterator[StreamEvent]:
        """Partial and completed images as they arrive; raises UpstreamError before or during the stream."""
        raise UpstreamError(f"{self.kind} upstreams cannot stream images", status=400, retryable=False)

    def _request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """Every HTTP call to a provider goes through here: pooled session, explicit timeouts."""
        read_timeout = float(self.upstream.timeout_seconds)
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamError("the call's deadline has passed", status=504, retryable=False)
            read_timeout = min(read_timeout, remaining)
        timeout = (min(CONNECT_TIMEOUT_SECONDS, read_timeout), read_timeout)
        try:
            return session_for(self.upstream.pk).request(method, url, timeout=timeout, **kwargs)
        except requests.ConnectTimeout as exc:
            raise UpstreamError("upstream connect timed out", status=None, retryable=True) from exc
        except requests.ReadTimeout as exc:
            raise UpstreamError(
                "upstream timed out", status=504, retryable=False, outcome_unknown=True
            ) from exc
        except requests.exceptions.ChunkedEncodingError as exc:
            raise UpstreamError(
                "upstream dropped the connection mid-answer",
                status=502,
                retryable=False,
                outcome_unknown=True,
            ) from exc
        except requests.ConnectionError as exc:
            if _never_connected(exc):
                # Refused or unreachable: the request never went out, so another attempt is safe.
                raise UpstreamError("upstream connection failed", status=None, retryable=True) from exc
            raise UpstreamError(
                "upstream closed the connection without answering",
                status=502,
                retryable=False,
                outcome_unknown=True,
            ) from exc


def _never_connected(exc: requests.ConnectionError) -> bool:
    """True when the connection was never established (so nothing was sent)."""
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    return isinstance(reason, NewConnectionError | NameResolutionError | ConnectTimeoutError)
