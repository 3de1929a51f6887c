"""The client's address behind a trusted proxy, request ids, the request-size limits gunicorn leaves
to the gateway, JSON errors for every /v1 and /files answer that is not produced by a DRF view, and
the browser-only middleware those requests skip."""

from __future__ import annotations

import ipaddress
import logging
import re
import uuid
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.csrf import CsrfViewMiddleware

from api.errors import api_error_from_exception
from core.errors import (
    TYPE_FOR_STATUS,
    ApiError,
    InternalError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    error_response,
)

logger = logging.getLogger("gateway.request")

_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
API_PREFIX = "/v1/"
# Signed links to hosted images: no cookie, no browser page, JSON errors like /v1 (images/hosting.py).
FILES_PREFIX = "/files/"


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


_FORWARDED = ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST")


class ForwardedHeadersMiddleware:
    """Believe X-Forwarded-For/-Proto/-Host only from a proxy in GATEWAY_TRUSTED_PROXIES.

    From a trusted peer, REMOTE_ADDR becomes the client's address: X-Forwarded-For read from the
    right (each proxy appends the address it was called from), skipping trusted proxies, as nginx's
    `real_ip_recursive` does; the addresses left of the first untrusted one are the client's to
    invent and are ignored. The proto and host headers stay for Django (SECURE_PROXY_SSL_HEADER,
    USE_X_FORWARDED_HOST). From any other peer all three are dropped, so a client cannot claim an
    address, https or a host. REMOTE_ADDR is changed in the WSGI environ itself: gunicorn's access
    log line, written after the answer, shows the client too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        meta = request.META
        trusted = settings.GATEWAY_TRUSTED_PROXIES
        if trusted and _is_trusted(meta.get("REMOTE_ADDR", ""), trusted):
            forwarded_for = meta.get("HTTP_X_FORWARDED_FOR")
            if forwarded_for:
                meta["REMOTE_ADDR"] = _client_address(forwarded_for, meta["REMOTE_ADDR"], trusted)
        else:
            for name in _FORWARDED:
                meta.pop(name, None)
        return self.get_response(request)


def _is_trusted(address: str, trusted: tuple) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False  # a UNIX socket's peer has no address: nothing says it is the proxy
    return any(ip in network for network in trusted)


def _client_address(forwarded_for: str, peer: str, trusted: tuple) -> str:
    address = peer
    for hop in reversed(forwarded_for.split(",")):
        if not _is_trusted(address, trusted):
            break
        hop = hop.strip()
        try:
            address = str(ipaddress.ip_address(hop))
        except ValueError:
            break  # not an address (a port, "unknown", garbage): the last good hop is the client
    return address


class RequestIdMiddleware:
    """Take the caller's X-Request-Id when it is sane (else make one) and echo it on every response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # META, not request.headers: that would build a mapping of every header on each request.
        offered = request.META.get("HTTP_X_REQUEST_ID", "")
        request.request_id = offered if _SANE_REQUEST_ID.fullmatch(offered) else new_request_id()
        response = self.get_response(request)
        response["X-Request-Id"] = request.request_id
        return response


class RequestLimitsMiddleware:
    """Refuse oversized request heads below gunicorn's own limits, so a client sees the gateway's
    answer (JSON under /v1 and /files) rather than gunicorn's HTML error page: 431 when one header
    line is over GATEWAY_MAX_HEADER_FIELD_BYTES or all of them together over GATEWAY_MAX_HEADER_BYTES,
    414 when the path and query are over GATEWAY_MAX_REQUEST_LINE_BYTES. gunicorn.conf.py sets its
    limits above these (README, "Production"); only a head over gunicorn's limits gets its page.

    Also 400 for a NUL character in the path or the query (`%00`): no route or parameter takes one,
    and PostgreSQL can neither store nor compare it (a view or an admin filter passing it on to a
    query would fail with a 500)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        refusal = _head_refusal(request)
        if refusal is None:
            return self.get_response(request)
        if is_json_path(request):
            return error_response(refusal, request=request)
        return HttpResponse(refusal.message, status=refusal.status, content_type="text/plain; charset=utf-8")


def _head_refusal(request: HttpRequest) -> ApiError | None:
    meta = request.META
    path, query = meta.get("PATH_INFO", ""), meta.get("QUERY_STRING", "")
    if "\x00" in path or "%00" in query:
        return ApiError(
            "The request's path or query string holds a NUL character (%00), which no route or "
            "parameter accepts.",
            status=400,
            type="invalid_request_error",
            code="invalid_request_target",
        )
    target = len(path) + len(query) + 1
    if target > settings.GATEWAY_MAX_REQUEST_LINE_BYTES:
        return ApiError(
            f"The request's path and query string are longer than the "
            f"{settings.GATEWAY_MAX_REQUEST_LINE_BYTES} bytes the gateway accepts.",
            status=414,
            type="invalid_request_error",
            code="uri_too_long",
        )
    field_limit = settings.GATEWAY_MAX_HEADER_FIELD_BYTES
    total = 0
    for name, value in meta.items():
        if name.startswith("HTTP_") or name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            # "Name: value\r\n" as sent; WSGI joins repeated headers with a comma, near enough.
            size = len(name) - (5 if name.startswith("HTTP_") else 0) + len(str(value)) + 4
            total += size
            if size > field_limit:
                return _headers_too_large(f"a header line is longer than the {field_limit} bytes")
    if total > settings.GATEWAY_MAX_HEADER_BYTES:
        return _headers_too_large(
            f"the headers are longer than the {settings.GATEWAY_MAX_HEADER_BYTES} bytes"
        )
    return None


def _headers_too_large(detail: str) -> ApiError:
    return ApiError(
        f"Request header fields too large: {detail} the gateway accepts.",
        status=431,
        type="invalid_request_error",
        code="request_header_fields_too_large",
    )


class ApiErrorMiddleware:
    """No /v1 or /files path ever answers HTML: 404s from the resolver, 405s, 400s and crashes become
    JSON errors."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_json_path(request) and _body_too_large(request):
            return error_response(
                PayloadTooLarge(
                    f"The request body is larger than this endpoint accepts "
                    f"({settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes)."
                ),
                request=request,
            )
        response = self.get_response(request)
        if not is_json_path(request) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").startswith(("application/json", "text/event-stream")):
            return response
        return error_response(_error_for_status(request, response.status_code), request=request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_json_path(request):
            return None
        error = api_error_from_exception(exception)
        if error is None:
            logger.exception(
                "unhandled error on %s %s request_id=%s",
                request.method,
                request.path,
                getattr(request, "request_id", "-"),
            )
            error = InternalError("The gateway hit an internal error; it has been logged.")
        return error_response(error, request=request)


class _BrowserOnly:
    """Middleware that only the console and the admin need. A /v1 caller authenticates every request
    with its key (api/authentication.py), a /files link with its signature, sends no cookies and gets
    none, and its JSON is never shown in a frame, so these requests skip it: no session store, no lazy
    user, no message storage built and torn down on every call (its cost: docs/benchmarks.md), no CSRF
    cookie read or check (no cookie authenticates them, so there is no cross-site request to forge:
    a POST to /files is its view's JSON 405, not Django's HTML CSRF page), no X-Frame-Options header.
    Their hooks for other paths are Django's own."""

    get_response: Callable[[HttpRequest], HttpResponse]

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_json_path(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class BrowserSessionMiddleware(_BrowserOnly, SessionMiddleware):
    pass


class BrowserAuthenticationMiddleware(_BrowserOnly, AuthenticationMiddleware):
    pass


class BrowserMessageMiddleware(_BrowserOnly, MessageMiddleware):
    pass


class BrowserCsrfViewMiddleware(_BrowserOnly, CsrfViewMiddleware):
    def process_view(self, request, callback, callback_args, callback_kwargs):  # type: ignore[no-untyped-def]
        # Django calls process_view outside __call__: skip it for the same requests.
        if is_json_path(request):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)


class BrowserXFrameOptionsMiddleware(_BrowserOnly, XFrameOptionsMiddleware):
    pass


def is_json_path(request: HttpRequest) -> bool:
    """/v1 and /files: every answer is JSON, no cookie authenticates a request, no browser middleware."""
    path = request.path
    return path == "/v1" or path.startswith((API_PREFIX, FILES_PREFIX))


def _body_too_large(request: HttpRequest) -> bool:
    """A declared non-multipart body over DATA_UPLOAD_MAX_MEMORY_SIZE.

    DRF's parsers read the body as a stream, so Django's own size check never runs for JSON; this is
    where such bodies are refused, before anything reads them. Multipart bodies are left to Django's
    multipart parser and the upload limits of the endpoints that take files.
    """
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None or request.META.get("CONTENT_TYPE", "").startswith("multipart/"):
        return False
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    return length > limit


def _error_for_status(request: HttpRequest, status: int) -> ApiError:
    if status == 404:
        return NotFound(f"No such route: {request.method} {request.path}.", code="route_not_found")
    if status == 405:
        return MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}.")
    if status >= 500:
        return InternalError("The gateway hit an internal error; it has been logged.")
    return ApiError(
        "The request was refused.", status=status, type=TYPE_FOR_STATUS.get(status, "invalid_request_error")
    )
