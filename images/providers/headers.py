"""Upstream responses whose header block is parsed without the email package.

`http.client` hands every response's header block to `email.parser` (the feedparser, policy
compat32), which took ~4 % of a gateway call's CPU in the application (~0.16 M instructions, measured
with `bench/instructions.py`) for the handful of plain headers an upstream sends. `headers_parse`
builds the same `http.client.HTTPMessage` itself when every line is a plain `Name: value` field or a
folded continuation of one; any other block (a bare CR inside a line, a line without a colon, a
continuation first, an end of file before the blank line, ...) goes to http.client's own parser. What
urllib3 and requests see is therefore what they would see without it: the tests compare both parsers
on a corpus of blocks and whole responses (tests/images/test_upstream_headers.py).

The upstream transports' connection pools use these connections (`UpstreamHTTPAdapter`); nothing else
in the process is changed.
"""

from __future__ import annotations

import http.client
import io
import re

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

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
    message = http.client.HTTPMessage()
    for source in fields:
        # compat32's header_source_parse: the value keeps its folded lines, minus the last line end.
        name, value = source[0].split(":", 1)
        message.set_raw(name, (value.lstrip(" \t") + "".join(source[1:])).rstrip("\r\n"))
    message.set_payload("")  # what the feedparser leaves after the blank line
    return message


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


class UpstreamHTTPConnection(HTTPConnection):
    response_class = UpstreamResponse


class UpstreamHTTPSConnection(HTTPSConnection):
    response_class = UpstreamResponse


class UpstreamHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = UpstreamHTTPConnection


class UpstreamHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = UpstreamHTTPSConnection


POOL_CLASSES_BY_SCHEME = {"http": UpstreamHTTPConnectionPool, "https": UpstreamHTTPSConnectionPool}
