"""Upstream responses whose header block is parsed without the email package.

`http.client` hands every response's header block to `email.parser` (the feedparser, policy
compat32), which took ~4 % of a gateway call's CPU in the application (~0.16 M instructions, measured
with `bench/instructions.py`) for the handful of plain headers an upstream sends. `headers_parse`
builds the same `http.client.HTTPMessage` itself when every line is a plain `Name: value` field or a
folded continuation of one; any other block (a bare CR inside a line, a line without a colon, a
continuation first, an end of file before the blank line, ...) goes to http.client's own parser. What
urllib3 and requests see is therefore what they would see without it: the tests compare both parsers
on a corpus of blocks and whole responses (tests/images/test_upstream_headers.py).

The message built here (`PlainHTTPMessage`) also reads its fields back without the email policy's
per-value check when the value is plain ASCII text (the check only ever changes text with surrogate
escapes): urllib3 reads every field of every response two or three times (`assert_header_parsing`,
`_normalize_header_values`, `HTTPHeaderDict`), and requests once more.

The connections also check a pooled connection's socket before reuse with the operating system's
`poll` (timeout 0: it never waits), not with gevent's emulation of it, which a gevent worker's
`select` module has: that builds a watcher and a result object per check (`is_connected`).

The upstream transports' connection pools use these connections (`UpstreamHTTPAdapter`); nothing else
in the process is changed.
"""

from __future__ import annotations

import functools
import http.client
import io
import re
from email.policy import compat32
from typing import Any

from urllib3.connection import HTTPConnection, HTTPSConnection, _ResponseOptions
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.request import SKIP_HEADER

from core.sockets import readable_now

# A field line as the feedparser takes one (its `headerRE`): a name of printable ASCII other than
# ':' (and so no space), then ':'. An empty name, or an mbox "From " line, goes to the full parser.
_FIELD = re.compile(r"[\041-\071\073-\176]+:")
_BLANK = (b"\r\n", b"\n")


def headers_parse(lines: list[bytes]) -> http.client.HTTPMessage:
    """The message http.client builds from a response's header lines (as its `_read_headers` returns
    them: the blank line last)."""
    if not lines or lines[-1] not in _BLANK:
        return _parse_full(lines)
    fields: list[list[str]] = []
    for raw in lines[:-1]:
        line = raw.decode("iso-8859-1")
        if line.endswith("\r\n"):
            text = line[:-2]
        elif line.endswith("\n"):
            text = line[:-1]
        else:
            return _parse_full(lines)
        if "\r" in text or "\n" in text:  # the feedparser splits lines on a bare CR too
            return _parse_full(lines)
        if text[:1] in (" ", "\t"):
            if not fields:
                return _parse_full(lines)
            fields[-1].append(line)
        elif _FIELD.match(text):
            fields.append([line])
        else:
            return _parse_full(lines)
    message = PlainHTTPMessage()
    for source in fields:
        # compat32's header_source_parse: the value keeps its folded lines, minus the last line end.
        name, value = source[0].split(":", 1)
        message.set_raw(name, (value.lstrip(" \t") + "".join(source[1:])).rstrip("\r\n"))
    message.set_payload("")  # what the feedparser leaves after the blank line
    return message


class PlainHTTPMessage(http.client.HTTPMessage):
    """An `HTTPMessage` whose plain values are read back as stored.

    The compat32 policy's `header_fetch_parse` (http.client's, and this message's) returns a str value
    unchanged unless it holds surrogate escapes, which it turns into a `Header`; an ASCII str holds
    none, so it is returned without the call. Anything else still goes through the policy: the results
    are the email package's.
    """

    def _fetched(self, name: str, value: Any) -> Any:
        if type(value) is str and value.isascii() and self.policy is compat32:
            return value
        return self.policy.header_fetch_parse(name, value)

    def get(self, name: str, failobj: Any = None) -> Any:
        name = name.lower()
        for key, value in self._headers:  # type: ignore[attr-defined]
            if key.lower() == name:
                return self._fetched(key, value)
        return failobj

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        return [(key, self._fetched(key, value)) for key, value in self._headers]  # type: ignore[attr-defined]

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self._fetched(key, value) for key, value in self._headers]  # type: ignore[attr-defined]

    def get_all(self, name: str, failobj: Any = None) -> Any:
        name = name.lower()
        values = [self._fetched(key, value) for key, value in self._headers if key.lower() == name]  # type: ignore[attr-defined]
        return values or failobj


def _parse_full(lines: list[bytes]) -> http.client.HTTPMessage:
    return http.client.parse_headers(io.BytesIO(b"".join(lines)))


class UpstreamResponse(http.client.HTTPResponse):
    def begin(self) -> None:
        """CPython 3.11's `http.client.HTTPResponse.begin` without its debug prints, the header block
        parsed by `headers_parse`. The tests hold it to the running Python's own on whole responses."""
        if self.headers is not None:
            # we've already started reading the response
            return

        # read until we get a non-100 response
        while True:
            version, status, reason = self._read_status()  # type: ignore[attr-defined]
            if status != http.client.CONTINUE:
                break
            # skip the header from the 100 response
            http.client._read_headers(self.fp)  # type: ignore[attr-defined]

        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            # Some servers might still return "0.9", treat it as 1.0 anyway
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11  # use HTTP/1.1 code for HTTP/1.x where x>=1
        else:
            raise http.client.UnknownProtocol(version)

        self.headers = self.msg = headers_parse(http.client._read_headers(self.fp))  # type: ignore[attr-defined]

        # are we using the chunked-style of transfer encoding?
        tr_enc = self.headers.get("transfer-encoding")
        if tr_enc and tr_enc.lower() == "chunked":
            self.chunked = True
            self.chunk_left = None
        else:
            self.chunked = False

        # will the connection close at the end of the response?
        self.will_close = self._check_close()  # type: ignore[attr-defined]

        # do we have a Content-Length?
        # NOTE: RFC 2616, S4.4, #3 says we ignore this if tr_enc is "chunked"
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked:
            try:
                self.length = int(length)
            except ValueError:
                self.length = None
            else:
                if self.length < 0:  # ignore nonsensical negative lengths
                    self.length = None
        else:
            self.length = None

        # does the body have a fixed length? (of zero)
        if (
            status == http.client.NO_CONTENT
            or status == http.client.NOT_MODIFIED
            or 100 <= status < 200  # 1xx codes
            or self._method == "HEAD"  # type: ignore[attr-defined]
        ):
            self.length = 0

        # if the connection remains open, and we aren't using chunked, and
        # a content-length was not provided, then assume that the connection
        # WILL close.
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True


class _UpstreamConnectionMixin:
    response_class = UpstreamResponse
    sock: Any

    @property
    def is_connected(self) -> bool:
        """urllib3's check of a pooled connection before reuse: connected, and nothing to read (a
        kept-alive connection with something to read, or at its end, was closed by the server)."""
        if self.sock is None:
            return False
        readable = readable_now(self.sock)
        if readable is None:
            return super().is_connected  # type: ignore[misc]
        return not readable

    def request(  # type: ignore[no-untyped-def]
        self,
        method: str,
        url: str,
        body: Any = None,
        headers: Any = None,
        *,
        chunked: bool = False,
        preload_content: bool = True,
        decode_content: bool = True,
        enforce_content_length: bool = True,
    ) -> None:
        """urllib3's `HTTPConnection.request` for what the upstream calls send: a bytes body (or none)
        with its Content-Length and a User-Agent among the headers, as requests prepares them.

        The same bytes go out as with urllib3's own, in one write instead of two (the head, then the
        body): one `sendall` less per call, and under gevent one `getsockopt` less (gevent asks for
        the send buffer's size on every `sendall`). Each header line is checked and encoded as
        http.client's `putheader` does it, once per distinct name and value. Anything else (chunked,
        a file or an iterable body, framing or skipped headers left to urllib3) is urllib3's own."""
        names = frozenset() if headers is None else frozenset(name.lower() for name in headers)
        if (
            chunked
            or not (body is None or type(body) is bytes)
            or "content-length" not in names
            or "transfer-encoding" in names
            or "user-agent" not in names
            or any(value == SKIP_HEADER for value in headers.values())
        ):
            return super().request(  # type: ignore[misc]
                method,
                url,
                body=body,
                headers=headers,
                chunked=chunked,
                preload_content=preload_content,
                decode_content=decode_content,
                enforce_content_length=enforce_content_length,
            )
        if self.sock is not None:
            self.sock.settimeout(self.timeout)  # type: ignore[attr-defined]
        self._response_options = _ResponseOptions(
            request_method=method,
            request_url=url,
            preload_content=preload_content,
            decode_content=decode_content,
            enforce_content_length=enforce_content_length,
        )
        self.putrequest(  # type: ignore[attr-defined]
            method, url, skip_accept_encoding="accept-encoding" in names, skip_host="host" in names
        )
        lines = self._buffer  # type: ignore[attr-defined]
        for name, value in headers.items():
            lines.append(_header_line(name, value))
        # endheaders(): the request is sent. http.client keeps this state in a private attribute.
        self._HTTPConnection__state = http.client._CS_REQ_SENT  # type: ignore[attr-defined]
        lines.extend((b"", b""))
        head = b"\r\n".join(lines)
        del lines[:]
        self.send(head + body if body else head)  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=256)
def _header_line(name: Any, value: Any) -> bytes:
    """One header line as http.client's `putheader(name, value)` writes it, with its errors."""
    if hasattr(name, "encode"):
        name = name.encode("ascii")
    if not http.client._is_legal_header_name(name):  # type: ignore[attr-defined]
        raise ValueError(f"Invalid header name {name!r}")
    if hasattr(value, "encode"):
        value = value.encode("latin-1")
    elif isinstance(value, int):
        value = str(value).encode("ascii")
    if http.client._is_illegal_header_value(value):  # type: ignore[attr-defined]
        raise ValueError(f"Invalid header value {value!r}")
    return name + b": " + value


class UpstreamHTTPConnection(_UpstreamConnectionMixin, HTTPConnection):
    pass


class UpstreamHTTPSConnection(_UpstreamConnectionMixin, HTTPSConnection):
    pass


class UpstreamHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = UpstreamHTTPConnection


class UpstreamHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = UpstreamHTTPSConnection


POOL_CLASSES_BY_SCHEME = {"http": UpstreamHTTPConnectionPool, "https": UpstreamHTTPSConnectionPool}
