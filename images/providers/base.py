"""The adapter interface every upstream kind implements, and the one HTTP path they all use.

Adapters turn an `ImageRequest` into an `ImageResult` or raise `UpstreamError`, which says whether
retrying can help. Every HTTP call to a provider goes through `Adapter._request`, on one pooled
`requests.Session` per upstream, with explicit connect and read timeouts.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.cookiejar import DefaultCookiePolicy
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import get_environ_proxies
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
    ReadTimeoutError,
)
from urllib3.exceptions import HTTPError as BodyReadError  # any failure while reading a body ourselves

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


_sessions: dict[tuple[int, str], requests.Session] = {}
_sessions_lock = threading.Lock()


def session_for(upstream: Upstream) -> requests.Session:
    """One pooled session per upstream (and base URL) per process, shared by the worker's threads."""
    key = (upstream.pk, upstream.base_url)
    session = _sessions.get(key)
    if session is None:
        with _sessions_lock:
            session = _sessions.get(key)
            if session is None:
                session = _session_new(base_url=upstream.base_url)
                _sessions[key] = session
    return session


def _session_new(*, base_url: str) -> requests.Session:
    """A session that reads the environment once instead of on every call.

    With `trust_env` on, requests scans os.environ for proxies twice and looks for ~/.netrc on every
    request. Every request of a session goes to its upstream's origin (the API, and image downloads
    only from the same scheme, host and port, see images.hosting), so the proxy decision for that
    origin (HTTP(S)_PROXY, NO_PROXY) and the CA bundle (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE) are taken
    here once. ~/.netrc is never read: its password would replace the provider key's Authorization
    header, and image downloads must send no credentials.
    """
    session = requests.Session()
    session.trust_env = False
    # One session serves every caller's calls to the upstream: never keep a cookie one call was given
    # for the next (possibly another account's) call.
    session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
    if base_url:
        session.proxies.update(get_environ_proxies(base_url))
    ca_bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if ca_bundle:
        session.verify = ca_bundle
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def response_json_take(response: requests.Response) -> Any:
    """The JSON of a fully read response; the response is left without its body.

    A large image answer is then never held more than twice at once: its bytes and their text (the
    bytes are dropped before parsing), then the text and the parsed strings. No charset guessing: JSON
    between systems is UTF-8 (a BOM is allowed; UTF-16/32 are still detected). Raises ValueError when
    the body is not JSON.
    """
    body = response.content
    response._content = b""  # the caller keeps the parsed answer, not the bytes
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        return json.loads(body)  # UTF-16/32 (json detects them), or a ValueError
    del body
    return json.loads(text)


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

    def _request(self, method: str, url: str, *, stream: bool = False, **kwargs: Any) -> requests.Response:
        """Every HTTP call to a provider goes through here: pooled session, explicit timeouts.

        Unless `stream` is set, the whole body is read before this returns (as `response.content`),
        and a failure while reading it is an UpstreamError like a failure before the answer.
        """
        read_timeout = float(self.upstream.timeout_seconds)
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamError("the call's deadline has passed", status=504, retryable=False)
            read_timeout = min(read_timeout, remaining)
        timeout = (min(CONNECT_TIMEOUT_SECONDS, read_timeout), read_timeout)
        session = session_for(self.upstream)
        allow_redirects = kwargs.pop("allow_redirects", True)
        try:
            response = session.send(
                _request_prepare(session, method, url, **kwargs),
                timeout=timeout,
                stream=True,
                verify=session.verify,
                cert=session.cert,
                proxies=session.proxies,
                allow_redirects=allow_redirects,
            )
            if not stream:
                _body_read(response)
            return response
        except requests.ConnectTimeout as exc:
            raise UpstreamError("upstream connect timed out", status=None, retryable=True) from exc
        except (requests.ReadTimeout, ReadTimeoutError) as exc:
            raise UpstreamError(
                "upstream timed out", status=504, retryable=False, outcome_unknown=True
            ) from exc
        except (requests.exceptions.ChunkedEncodingError, BodyReadError) as exc:
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


def _request_prepare(
    session: requests.Session,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json: Any = None,
    data: Any = None,
    files: Any = None,
) -> requests.PreparedRequest:
    """What `Session.request` sends, without its per-call merging of session-level settings.

    That merging (`merge_setting` for headers, params, auth, hooks, proxies, stream, verify, cert,
    each through runtime Protocol checks, and two cookie-jar copies) cost ~0.2 ms a call for settings
    that never vary here: the session's headers are the defaults plus nothing, and the proxies, CA
    bundle and certificate are passed to `send` as the session holds them. No cookies are sent: the
    session is shared by every caller's calls (its jar accepts none, see `_session_new`).
    """
    merged = CaseInsensitiveDict(session.headers)
    if headers:
        merged.update(headers)
    prepared = requests.PreparedRequest()
    prepared.prepare(method=method.upper(), url=url, headers=merged, files=files, data=data, json=json)
    return prepared


def _body_read(response: requests.Response) -> None:
    """Read the whole body into `response.content` with one allocation.

    requests' own `content` joins 10 KB reads, each a Python-level call: a 5 MB image answer is then
    held twice at the join, after ~500 iterations. urllib3 reads a body of known length in one piece
    (and gives the connection back to the pool once it is read).
    """
    response._content = response.raw.read(decode_content=True) or b""
    response._content_consumed = True


def _never_connected(exc: requests.ConnectionError) -> bool:
    """True when the connection was never established (so nothing was sent)."""
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    return isinstance(reason, NewConnectionError | NameResolutionError | ConnectTimeoutError)
