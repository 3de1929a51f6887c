"""The one HTTP path to upstream providers: every adapter, and every image download, calls
`upstream_request`.

One pooled `requests.Session` per upstream per process, explicit connect and read timeouts bounded by
the call's deadline, redirects never followed, the environment read once, no cookie kept from one
caller's call for the next. Failures come out as `UpstreamError`, which says whether retrying can help.
Only the public API of requests and urllib3 is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from http.cookiejar import DefaultCookiePolicy
from typing import TYPE_CHECKING, Any

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers, get_environ_proxies
from urllib3.exceptions import (
    ConnectTimeoutError,
    DecodeError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
    ReadTimeoutError,
)
from urllib3.exceptions import HTTPError as BodyReadError  # any failure while reading a body ourselves

from upstreams.chunked import ChunkedBody, SocketBody, chunked_body
from upstreams.errors import UpstreamError
from upstreams.pinned import PinnedHTTPAdapter

if TYPE_CHECKING:
    from upstreams.snapshots import UpstreamSnapshot

CONNECT_TIMEOUT_SECONDS = 5.0
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# What an exchange can fail with (anything else, e.g. an invalid URL, is a bug and is not caught).
FAILURES = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    BodyReadError,
)


class UpstreamReply:
    """An upstream's answer: its status, its headers, and either its whole body (`body`) or, for a
    streamed call, the open response read with `chunks` and given back with `close`."""

    def __init__(self, *, response: requests.Response, body: bytes | None, proxied: bool = False) -> None:
        self.status: int = response.status_code
        self.headers: CaseInsensitiveDict[str] = response.headers
        self.body = body or b""
        self.streamed = response if body is None else None
        self.chunked: ChunkedBody | None = None  # a streamed chunked body being read (`chunks`)
        # Through a proxy, the connection's peer is the proxy, not the host the URL names.
        self.proxied = proxied

    @property
    def peer(self) -> tuple[str, int] | None:
        """(address, port) of the server a streamed reply's connection is connected to, while it is
        held (urllib3's public `HTTPResponse.connection`); None when unknown: under `responses`, or when
        the server said it closes the connection after its answer (http.client then lets go of it)."""
        if self.streamed is None:
            return None
        connection = getattr(self.streamed.raw, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is None:
            return None
        try:
            address = sock.getpeername()
        except OSError:
            return None
        return str(address[0]), int(address[1])

    @property
    def is_redirect(self) -> bool:
        return self.status in REDIRECT_STATUSES and "Location" in self.headers

    def body_take(self) -> bytes:
        """The body, taken out of the reply, which then holds none: the caller keeps what it makes of it."""
        body, self.body = self.body, b""
        return body

    def json_take(self) -> Any:
        """The body's JSON; the reply is left without its bytes.

        A large image answer is then never held more than twice at once: its bytes and their text (the
        bytes are dropped before parsing), then the text and the parsed strings. JSON between systems
        is UTF-8 (a BOM is allowed; json still detects UTF-16/32). Raises ValueError when it is not JSON.
        """
        body = self.body_take()
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError:
            return json.loads(body)  # UTF-16/32 (json detects them), or a ValueError
        del body
        return json.loads(text)

    def json(self) -> Any:
        """The body's JSON, keeping the bytes; raises ValueError when it is not JSON."""
        return json.loads(self.body)

    def text(self) -> str:
        """The body as text, in the charset its Content-Type names (UTF-8 if none)."""
        encoding = get_encoding_from_headers(self.headers) or "utf-8"
        try:
            return self.body.decode(encoding, "replace")
        except LookupError:  # a charset Python does not know
            return self.body.decode("utf-8", "replace")

    def chunks(self, size: int) -> Iterator[bytes]:
        """A streamed body's bytes as they arrive (whatever has come, up to `size`, never waiting for
        more); a failure while reading is an UpstreamError whose outcome is unknown."""
        if self.streamed is None:
            raise ValueError("only a streamed reply is read in chunks")
        raw = self.streamed.raw
        try:
            self.chunked = chunked_body(raw)
            if self.chunked is not None:  # whatever one read of the connection brings (upstreams/chunked.py)
                yield from self.chunked.pieces(size)
                return
            while chunk := raw.read1(size, decode_content=True):
                yield chunk
        except FAILURES as exc:
            raise _classified(exc) from exc

    def direct(self, size: int) -> DirectBody | None:
        """The rest of a streamed body that `chunks` is reading, to be read without waiting by a reader
        that waits for many connections at once (upstreams/chunked.py, `ChunkedBody.direct`): only
        between two pieces, and only for a chunked body read through the socket path; else None."""
        if self.chunked is None:
            return None
        socket_body = self.chunked.direct(size)
        return None if socket_body is None else DirectBody(socket_body, size)

    def end_await(self, timeout: float) -> None:
        """After a stream's final event: its body's end, if it comes within `timeout` seconds, so that
        `close` gives the connection back (`ChunkedBody.end_await`). A failure here only means the
        connection is dropped on close."""
        if self.chunked is not None:
            with contextlib.suppress(BodyReadError):
                self.chunked.end_await(timeout)

    def read(self) -> None:
        """Read a streamed reply's body to its end, into `body` (an error answer's, say)."""
        self.body = b"".join(self.chunks(64 * 1024))

    def close(self) -> None:
        """Give a streamed reply's connection back (or drop it, if the body was not read to its end)."""
        if self.chunked is not None:
            self.chunked.release()  # read to its end, by `chunks` or `direct`: back to the pool
        if self.streamed is not None:
            self.streamed.close()

    def __enter__(self) -> UpstreamReply:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class DirectBody:
    """The rest of a streamed body, read one piece at a time without waiting (`UpstreamReply.direct`):
    `fileno` to wait on, `read` once it is readable; `chunks` may take over again between two reads."""

    __slots__ = ("_body", "_size", "fd")

    def __init__(self, body: SocketBody, size: int) -> None:
        self._body = body
        self._size = size
        self.fd = body.fd

    @property
    def done(self) -> bool:
        """The body has been read to its end."""
        return self._body.body.done

    def read(self) -> bytes | None:
        """The body's bytes one read of the socket brings (b"" if it brought framing only); None when
        nothing has arrived; an UpstreamError whose outcome is unknown when the read fails."""
        try:
            return self._body.read(self._size)
        except FAILURES as exc:
            raise _classified(exc) from exc


class UpstreamHTTPAdapter(HTTPAdapter):
    """requests' adapter, with the connection pool and request target of a URL looked up once.

    Both are overrides of the adapter's documented methods. requests parses the URL, selects a
    proxy and builds a pool key on every call; one upstream's calls all go to one origin (image
    downloads too, see images.hosting), so without a proxy the answer is kept. The caches are
    bounded and emptied when the adapter is closed (which closes its pools).
    """

    CACHE_SIZE = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pools: dict[tuple[str, Any, Any], Any] = {}
        self.targets: dict[str, str] = {}

    def get_connection_with_tls_context(
        self, request: requests.PreparedRequest, verify: Any, proxies: Any = None, cert: Any = None
    ) -> Any:
        if proxies:
            return super().get_connection_with_tls_context(request, verify, proxies=proxies, cert=cert)
        url = request.url or ""
        key = ("/".join(url.split("/", 3)[:3]), verify, cert)  # scheme://host:port
        pool = self.pools.get(key)
        if pool is None:
            pool = super().get_connection_with_tls_context(request, verify, proxies=proxies, cert=cert)
            _bounded_put(self.pools, key, pool)
        return pool

    def request_url(self, request: requests.PreparedRequest, proxies: Any) -> str:
        if proxies:
            return super().request_url(request, proxies)
        url = request.url or ""
        target = self.targets.get(url)
        if target is None:
            target = super().request_url(request, proxies)
            _bounded_put(self.targets, url, target)
        return target

    def close(self) -> None:
        self.pools.clear()
        self.targets.clear()
        super().close()


def _bounded_put(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= UpstreamHTTPAdapter.CACHE_SIZE:
        cache.clear()
    cache[key] = value


class Transport:
    """One upstream's HTTP client in this process: a session with its pools, and the requests prepared
    once per (method, URL, headers) that each call copies and gives its own body."""

    def __init__(self, *, base_url: str, pinned: bool = False) -> None:
        """`pinned`: for requests to URLs pinned to a checked address (upstreams/pinned.py), whose
        pools are keyed by the host's name too, not by the URL's scheme, address and port only."""
        session = requests.Session()
        # requests reads the environment (proxies, twice, and ~/.netrc) on every call when trust_env is
        # on. Every request of a session goes to its upstream's origin (image downloads too, see
        # images.hosting), so the proxy decision and the CA bundle are taken here once. ~/.netrc is
        # never read: its password would replace the provider key, and downloads send no credentials.
        session.trust_env = False
        # One session serves every caller's calls: its jar accepts no cookie (and calls go out
        # without the session's cookies in any case, see `_prepared`).
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        if base_url:
            session.proxies.update(get_environ_proxies(base_url))
        ca_bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if ca_bundle:
            session.verify = ca_bundle
        # Never blocks: a call beyond the pool's size opens a connection of its own.
        pool_size = settings.GATEWAY_UPSTREAM_POOL_SIZE
        adapter_class = PinnedHTTPAdapter if pinned else UpstreamHTTPAdapter
        self.adapter: HTTPAdapter = adapter_class(pool_connections=4, pool_maxsize=pool_size, max_retries=0)
        session.mount("http://", self.adapter)
        session.mount("https://", self.adapter)
        self.session = session
        self.templates: dict[tuple[str, str, tuple[tuple[str, str], ...]], requests.PreparedRequest] = {}

    def request(
        self,
        method: str,
        url: str,
        *,
        timeout: tuple[float, float],
        stream: bool = False,
        headers: dict[str, str] | None = None,
        json: Any = None,
        data: Any = None,
        files: Any = None,
    ) -> UpstreamReply:
        """Send one request; unless `stream`, read its whole body before returning."""
        session = self.session
        try:
            # The adapter's public `send`, as `Session.send` would call it: there are no hooks, cookies
            # or redirects to handle here (a redirect is answered to the caller as it came).
            response = self.adapter.send(
                self._prepared(method, url, headers=headers, json=json, data=data, files=files),
                stream=True,
                timeout=timeout,
                verify=True if session.verify is None else session.verify,
                cert=session.cert,
                proxies=session.proxies,
            )
            if stream:
                return UpstreamReply(response=response, body=None, proxied=bool(session.proxies))
            return UpstreamReply(response=response, body=_whole_body(response))
        except FAILURES as exc:
            raise _classified(exc) from exc

    def _prepared(
        self, method: str, url: str, *, headers: dict[str, str] | None, json: Any, data: Any, files: Any
    ) -> requests.PreparedRequest:
        """What `Session.request` would send, without a cookie, with method, URL and headers prepared
        (and checked) once per endpoint and header set, and only the body prepared per call."""
        key = (method, url, tuple(headers.items()) if headers else ())
        template = self.templates.get(key)
        if template is None:
            merged = CaseInsensitiveDict(self.session.headers)
            if headers:
                merged.update(headers)
            template = requests.PreparedRequest()
            template.prepare(method=method, url=url, headers=merged)
            template.headers.pop("Content-Length", None)  # set from each call's body
            _bounded_put(self.templates, key, template)
        prepared = requests.PreparedRequest()
        prepared.method = template.method
        prepared.url = template.url
        prepared.headers = template.headers.copy()
        prepared.prepare_body(data, files, json)
        return prepared


def _whole_body(response: requests.Response) -> bytes:
    """A non-streamed answer's whole (decoded) body, in one read, which also gives the connection back
    to the pool. A body of more than GATEWAY_UPSTREAM_ANSWER_MAX_BYTES, declared or decoded, is the
    upstream's failure: its connection is closed, and the call's outcome is unknown."""
    limit = settings.GATEWAY_UPSTREAM_ANSWER_MAX_BYTES
    declared = response.headers.get("Content-Length", "")
    if not (declared.isdigit() and int(declared) > limit):
        body = response.raw.read(limit + 1, decode_content=True) or b""
        if len(body) <= limit:
            return body
    response.close()
    raise UpstreamError(
        f"upstream answered more than {limit} bytes", status=502, retryable=False, outcome_unknown=True
    )


_transports: dict[tuple[int, str], Transport] = {}
_transports_lock = threading.Lock()


def transport_for(upstream: UpstreamSnapshot) -> Transport:
    """One pooled transport per upstream (and base URL) per process, shared by the worker's calls."""
    key = (upstream.pk, upstream.base_url)
    transport = _transports.get(key)
    if transport is None:
        with _transports_lock:
            transport = _transports.get(key)
            if transport is None:
                transport = _transports[key] = Transport(base_url=upstream.base_url)
    return transport


def upstream_request(
    *,
    upstream: UpstreamSnapshot,
    method: str,
    url: str,
    deadline: float | None = None,
    stream: bool = False,
    headers: dict[str, str] | None = None,
    json: Any = None,
    data: Any = None,
    files: Any = None,
) -> UpstreamReply:
    """Every HTTP call to a provider: its read timeout is the upstream's, cut to what is left before
    `deadline` (an absolute `time.monotonic()`), and connecting takes at most 5 s of it."""
    read_timeout = float(upstream.timeout_seconds)
    if deadline is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise UpstreamError("the call's deadline has passed", status=504, retryable=False)
        read_timeout = min(read_timeout, remaining)
    return transport_for(upstream).request(
        method,
        url,
        timeout=(min(CONNECT_TIMEOUT_SECONDS, read_timeout), read_timeout),
        stream=stream,
        headers=headers,
        json=json,
        data=data,
        files=files,
    )


def upstream_read_timed_out() -> UpstreamError:
    """The UpstreamError of a read that waited past its timeout (as `_classified` makes it)."""
    return UpstreamError("upstream timed out", status=504, retryable=False, outcome_unknown=True)


def _classified(exc: Exception) -> UpstreamError:
    """The UpstreamError for a failed exchange: retryable only when nothing can have been sent."""
    if isinstance(exc, requests.ConnectTimeout):
        return UpstreamError("upstream connect timed out", status=None, retryable=True)
    if isinstance(exc, requests.ReadTimeout | ReadTimeoutError):
        return upstream_read_timed_out()
    if isinstance(exc, requests.ConnectionError) and connection_never_made(exc):
        # Refused or unreachable: the request never went out, so another attempt is safe.
        return UpstreamError("upstream connection failed", status=None, retryable=True)
    if isinstance(exc, DecodeError | requests.exceptions.ContentDecodingError):
        return UpstreamError(
            "upstream answered a body its Content-Encoding does not decode",
            status=502,
            retryable=False,
            outcome_unknown=True,
        )
    if isinstance(exc, requests.ConnectionError):
        return UpstreamError(
            "upstream closed the connection without answering",
            status=502,
            retryable=False,
            outcome_unknown=True,
        )
    return UpstreamError(
        "upstream dropped the connection mid-answer", status=502, retryable=False, outcome_unknown=True
    )


def connection_never_made(exc: requests.ConnectionError) -> bool:
    """True when the connection was never established (so nothing was sent, and another address may
    be tried)."""
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    return isinstance(reason, NewConnectionError | NameResolutionError | ConnectTimeoutError)
