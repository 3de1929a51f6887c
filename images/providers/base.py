"""The adapter interface every upstream kind implements, and the one HTTP path they all use.

Adapters turn an `ImageRequest` into an `ImageResult` or raise `UpstreamError`, which says whether
retrying can help. Every HTTP call to a provider goes through `Adapter._request`, on one pooled
`requests.Session` per upstream, with explicit connect and read timeouts.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import requests
from requests.adapters import HTTPAdapter

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


class UpstreamError(Exception):
    """A failed upstream call. `retryable` says whether another attempt (or upstream) may succeed;
    `sent` says whether the request may have reached the provider (then it may have billed us)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        retryable: bool,
        body: Any = None,
        sent: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.body = body
        self.sent = sent
        self.retry_after = retry_after


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

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def generate(self, request: ImageRequest) -> ImageResult:
        raise UpstreamError(f"{self.kind} upstreams cannot generate images", status=None, retryable=False)

    def edit(self, request: ImageRequest) -> ImageResult:
        raise UpstreamError(f"{self.kind} upstreams cannot edit images", status=None, retryable=False)

    def call(self, request: ImageRequest) -> ImageResult:
        return self.generate(request) if request.operation == "generate" else self.edit(request)

    def _request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """Every HTTP call to a provider goes through here: pooled session, explicit timeouts."""
        timeout = (CONNECT_TIMEOUT_SECONDS, float(self.upstream.timeout_seconds))
        try:
            return session_for(self.upstream.pk).request(method, url, timeout=timeout, **kwargs)
        except requests.ConnectTimeout as exc:
            raise UpstreamError("upstream connect timed out", status=None, retryable=True) from exc
        except requests.ReadTimeout as exc:
            raise UpstreamError("upstream timed out", status=504, retryable=False, sent=True) from exc
        except requests.ConnectionError as exc:
            # A refused or reset connection before the request went out can be retried.
            raise UpstreamError("upstream connection failed", status=None, retryable=True) from exc
