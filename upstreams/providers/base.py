"""The adapter interface every upstream kind implements, and the one HTTP path they all use.

Adapters turn an `ImageRequest` into an `ImageResult` or raise `UpstreamError`, which says whether
retrying can help. Every HTTP call to a provider goes through `Adapter._request`, on one pooled
`requests.Session` per upstream, with explicit connect and read timeouts.
"""

from __future__ import annotations

import datetime
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
from requests.cookies import RequestsCookieJar, cookiejar_from_dict
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers, get_environ_proxies
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
    ReadTimeoutError,
)
from urllib3.exceptions import HTTPError as BodyReadError  # any failure while reading a body ourselves

from upstreams.providers.headers import POOL_CLASSES_BY_SCHEME

if TYPE_CHECKING:
    from upstreams.models import Upstream

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


class UpstreamHTTPAdapter(HTTPAdapter):
    """requests' adapter, with the work that never varies between one upstream's calls done once.

    requests' `HTTPAdapter.send` stays the boundary every call goes through (and the one `responses`
    replaces in tests); only the steps it delegates are narrowed:

    - the connection pool for an origin is looked up once (requests parses the URL, selects a proxy
      and normalizes a pool key on every call), unless a proxy is configured;
    - the request target (the URL's path and query) is worked out once per URL when no proxy is used;
    - responses are built without reading cookies: no call ever sends one (see `_transport_new`);
    - response headers are parsed without the email package (`upstreams.providers.headers`), on the
      direct connections (a proxy's pools are urllib3's own).

    A cached pool is given up once closed (urllib3 1.x closes the pools its PoolManager evicts; 2.x
    leaves them working), and both caches are bounded: image downloads can ask for many URLs of one
    origin.
    """

    CACHE_SIZE = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pools: dict[tuple[str, Any, Any], Any] = {}
        self._targets: dict[str, str] = {}

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = POOL_CLASSES_BY_SCHEME

    def get_connection_with_tls_context(
        self, request: requests.PreparedRequest, verify: Any, proxies: Any = None, cert: Any = None
    ) -> Any:
        if proxies:
            return super().get_connection_with_tls_context(request, verify, proxies=proxies, cert=cert)
        key = (_origin(request.url or ""), verify, cert)
        pool = self._pools.get(key)
        if pool is None or pool.pool is None:  # urllib3 sets `pool` to None when it closes one
            pool = super().get_connection_with_tls_context(request, verify, proxies=proxies, cert=cert)
            _bounded_put(self._pools, key, pool, self.CACHE_SIZE)
        return pool

    def request_url(self, request: requests.PreparedRequest, proxies: Any) -> str:
        if proxies:
            return super().request_url(request, proxies)
        url = request.url or ""
        target = self._targets.get(url)
        if target is None:
            target = super().request_url(request, proxies)
            _bounded_put(self._targets, url, target, self.CACHE_SIZE)
        return target

    def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        """`HTTPAdapter.build_response` without `extract_cookies_to_jar`: the cookies are never used."""
        response = UpstreamResponse()
        response.status_code = getattr(resp, "status", None)  # type: ignore[assignment]
        response.headers = CaseInsensitiveDict(getattr(resp, "headers", {}))
        response.encoding = get_encoding_from_headers(response.headers)
        response.raw = resp
        response.reason = resp.reason
        response.url = req.url.decode("utf-8") if isinstance(req.url, bytes) else req.url  # type: ignore[assignment]
        response.request = req
        response.connection = self  # type: ignore[attr-defined]
        return response


class UpstreamResponse(requests.Response):
    """requests' `Response`, whose cookie jar is made only if something reads it.

    `requests.Response()` makes an empty `RequestsCookieJar` for every answer: a cookie policy object
    and a lock (in a gevent worker, gevent's Python lock), ~1 % of a call's CPU at concurrency 1
    (py-spy), for a jar the gateway never reads (no call sends or keeps a cookie). Everything else is
    as requests sets it; tests/images/test_upstream_http.py compares a fresh one with requests' own.
    """

    def __init__(self) -> None:
        # requests.Response.__init__, but for the cookie jar.
        self._content = False
        self._content_consumed = False
        self._next = None
        self.status_code = None  # type: ignore[assignment]
        self.headers = CaseInsensitiveDict()
        self.raw = None
        self.url = None  # type: ignore[assignment]
        self.encoding = None
        self.history = []
        self.reason = None  # type: ignore[assignment]
        self.elapsed = datetime.timedelta(0)
        self.request = None  # type: ignore[assignment]

    @property  # type: ignore[override]
    def cookies(self) -> RequestsCookieJar:
        jar = self.__dict__.get("cookies")
        if jar is None:
            jar = self.__dict__["cookies"] = cookiejar_from_dict({})
        return jar

    @cookies.setter
    def cookies(self, jar: RequestsCookieJar) -> None:
        self.__dict__["cookies"] = jar


def _origin(url: str) -> str:
    """The scheme, host and port of an absolute URL, without parsing it (a cache key, not a check)."""
    return "/".join(url.split("/", 3)[:3])


def _bounded_put(cache: dict, key: Any, value: Any, size: int) -> None:
    if len(cache) >= size:
        cache.clear()
    cache[key] = value


@dataclass
class Transport:
    """One upstream's HTTP client in this process: a requests session, its adapter, and the requests
    prepared once per (method, URL, headers) that calls copy."""

    session: requests.Session
    adapter: UpstreamHTTPAdapter
    templates: dict[tuple[str, str, tuple[tuple[str, str], ...]], requests.PreparedRequest] = field(
        default_factory=dict
    )


_transports: dict[tuple[int, str], Transport] = {}
_transports_lock = threading.Lock()


def transport_for(upstream: Upstream) -> Transport:
    """One pooled transport per upstream (and base URL) per process, shared by the worker's calls."""
    key = (upstream.pk, upstream.base_url)
    transport = _transports.get(key)
    if transport is None:
        with _transports_lock:
            transport = _transports.get(key)
            if transport is None:
                transport = _transport_new(base_url=upstream.base_url)
                _transports[key] = transport
    return transport


def _transport_new(*, base_url: str) -> Transport:
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
    adapter = UpstreamHTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return Transport(session=session, adapter=adapter)


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
        """Every HTTP call to a provider goes through here: pooled connections, explicit timeouts.

        Unless `stream` is set, the whole body is read before this returns (as `response.content`),
        and a failure while reading it is an UpstreamError like a failure before the answer.
        Redirects are never followed: a provider's API does not redirect, and image downloads follow
        them one hop at a time with their own checks (images.hosting).
        """
        read_timeout = float(self.upstream.timeout_seconds)
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamError("the call's deadline has passed", status=504, retryable=False)
            read_timeout = min(read_timeout, remaining)
        timeout = (min(CONNECT_TIMEOUT_SECONDS, read_timeout), read_timeout)
        transport = transport_for(self.upstream)
        session = transport.session
        try:
            # The adapter directly, as `Session.send` would call it: no hooks, cookies or redirects
            # to handle here.
            response = transport.adapter.send(
                _request_prepare(transport, method, url, **kwargs),
                stream=True,
                timeout=timeout,
                verify=session.verify,
                cert=session.cert,
                proxies=session.proxies,
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
    transport: Transport,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json: Any = None,
    data: Any = None,
    files: Any = None,
) -> requests.PreparedRequest:
    """What `Session.request` would send, with the parts that never vary prepared once.

    Method, URL (parsed and checked), headers (the session's defaults with the call's, each checked)
    and authentication from the URL are the same for every call to one endpoint of an upstream with
    the same headers: they are prepared the first time and copied after, and only the body is
    prepared per call. Session-level merging is not needed either: the session's headers are the
    defaults, and its proxies, CA bundle and certificate are passed to the adapter as it holds them.
    No cookies are sent: the session is shared by every caller's calls (its jar accepts none).
    """
    key = (method, url, tuple(headers.items()) if headers else ())
    template = transport.templates.get(key)
    if template is None:
        merged = CaseInsensitiveDict(transport.session.headers)
        if headers:
            merged.update(headers)
        template = requests.PreparedRequest()
        template.prepare(method=method.upper(), url=url, headers=merged)
        template.headers.pop("Content-Length", None)  # set from each call's body
        _bounded_put(transport.templates, key, template, UpstreamHTTPAdapter.CACHE_SIZE)
    prepared = requests.PreparedRequest()
    prepared.method = template.method
    prepared.url = template.url
    prepared.headers = template.headers.copy()
    prepared._cookies = template._cookies  # empty, and never written: no cookie is read or sent
    prepared.hooks = template.hooks
    prepared.prepare_body(data, files, json)
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
