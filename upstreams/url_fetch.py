"""Downloading what a URL someone gave the gateway points to (an image a caller sent by link, for an
upstream that needs its bytes), under the request-forgery rules of upstreams/ssrf.py.

Each hop of a redirect (at most `MAX_REDIRECTS`, followed here, never by requests) is checked as a
new URL and requested at the address checked (upstreams/pinned.py: the host is not resolved again),
and the address connected to is checked again once connected. No credential, cookie or
proxy of an upstream goes with it: the requests go through a transport of their own, which reads
no proxy from the environment (the peer checked is then always the server itself). The body is read
against a size cap and a deadline, and its declared media type must be one the caller accepts.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from urllib.parse import urljoin

from core.overload import call_start_paused
from upstreams.errors import UpstreamError, UrlRefused
from upstreams.providers.base import USER_AGENT
from upstreams.ssrf import CheckedTarget, peer_address_check, url_target_resolve
from upstreams.transport import CONNECT_TIMEOUT_SECONDS, Transport, UpstreamReply

MAX_REDIRECTS = 3
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class FetchedBody:
    """A downloaded body and the media type its server declared (lowercase, without parameters)."""

    media_type: str
    data: bytes


def url_fetch(*, url: str, deadline: float, max_bytes: int, media_types: frozenset[str]) -> FetchedBody:
    """GET a URL only a public (or operator-allowed) server answers, its body within `max_bytes`, all
    of it before `deadline` (a `time.monotonic()`); a 200 whose Content-Type is in `media_types`.
    Raises UrlRefused saying what was wrong, without the URL (the caller knows where it wrote it).
    The time it takes is not counted as the call's start (core/overload.py): it is the server's."""
    with call_start_paused():
        return _fetch(url=url, deadline=deadline, max_bytes=max_bytes, media_types=media_types)


def _fetch(*, url: str, deadline: float, max_bytes: int, media_types: frozenset[str]) -> FetchedBody:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        target = url_target_resolve(url=current)
        with _pinned_get(target=target, deadline=deadline, media_types=media_types) as reply:
            peer_address_check(peer=reply.peer, port=target.origin.port)
            if reply.is_redirect:
                try:
                    current = urljoin(current, reply.headers.get("Location", ""))
                except ValueError:  # urllib's parser refuses it (an unbalanced "[" of an IPv6 host)
                    raise UrlRefused("the download redirected to an unreadable URL") from None
                continue
            if reply.status != 200:
                raise UrlRefused(f"the server answered HTTP {reply.status}")
            media_type = reply.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if media_type not in media_types:
                declared, accepted = media_type or "no Content-Type", ", ".join(sorted(media_types))
                raise UrlRefused(f"the server answered {declared}, not one of {accepted}")
            return FetchedBody(
                media_type=media_type, data=_body_read(reply=reply, deadline=deadline, max_bytes=max_bytes)
            )
    raise UrlRefused(f"the download redirected more than {MAX_REDIRECTS} times")


def _pinned_get(*, target: CheckedTarget, deadline: float, media_types: frozenset[str]) -> UpstreamReply:
    """GET the target at the addresses checked, in turn while one cannot be connected to (nothing
    was sent to it); the Host header names the URL's host."""
    headers = {"Accept": ", ".join(sorted(media_types)), "Host": target.host_header, "User-Agent": USER_AGENT}

    def get(pinned_url: str) -> UpstreamReply:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise UrlRefused("the download took too long")
        timeout = (min(CONNECT_TIMEOUT_SECONDS, remaining), remaining)
        return _transport_get().request("GET", pinned_url, timeout=timeout, stream=True, headers=headers)

    *others, last = target.pinned_urls
    for pinned_url in others:
        try:
            return get(pinned_url)
        except UpstreamError as failed:
            if failed.status is not None or not failed.retryable:  # the request may have gone out
                raise _failed(failed) from None
    try:
        return get(last)
    except UpstreamError as failed:
        raise _failed(failed) from None


def _body_read(*, reply: UpstreamReply, deadline: float, max_bytes: int) -> bytes:
    declared = reply.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise UrlRefused(f"the file is larger than {max_bytes} bytes")
    chunks: list[bytes] = []
    total = 0
    pieces = reply.chunks(CHUNK_BYTES)
    while True:
        try:
            chunk = next(pieces, None)
        except UpstreamError as exc:
            raise _failed(exc) from exc
        if chunk is None:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise UrlRefused(f"the file is larger than {max_bytes} bytes")
        if time.monotonic() > deadline:
            raise UrlRefused("the download took too long")
        chunks.append(chunk)


def _failed(error: UpstreamError) -> UrlRefused:
    if error.status == 504:
        return UrlRefused("the download took too long")
    if error.status is None:
        return UrlRefused("the server could not be reached")
    return UrlRefused("the server dropped the connection")


@functools.cache
def _transport_get() -> Transport:
    """The process's transport for such downloads (no base URL: no proxy, no upstream's key), its
    requests sent to the addresses checked."""
    return Transport(base_url="", pinned=True)
