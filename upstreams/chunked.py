"""A streamed upstream body read as it arrives, one piece per socket read, however many HTTP chunks
that read holds: the read path of event streams (upstreams/sse.py).

This is the one module that reaches past the public API of urllib3 and http.client
(docs/architecture.md, "Library internals"). Through their public API, a chunked body is read one HTTP
chunk per call (http.client's `read1` stops at the end of the current chunk), and a provider sends
each event of a stream as a chunk of its own: every event then costs a pass through urllib3's and
http.client's reading code and its own write to the caller, even when many have already arrived. Here
the chunk framing is undone on whatever one read of the connection returns, so the events that have
arrived together are parsed and relayed together (docs/benchmarks.md gives what it saves).

What it uses, checked by tests/upstreams/test_chunked.py, which fails if a release changes them:
- urllib3's `HTTPResponse._fp`: the `http.client.HTTPResponse` it reads from (urllib3 2.x);
- that response's `chunked`, `chunk_left` and `fp` attributes: whether the body is chunked, whether any
  of it was read yet, and the buffered reader of the socket, whose `read1` returns what is buffered or
  what one read of the socket brings;
- at the body's end, the public `http.client.HTTPResponse.close` and urllib3's `release_conn`, which
  give the connection back to the pool, as urllib3 does itself when it reads a body to its end.

Anything else (a body not chunked, or content-encoded, or a response that is not urllib3's, such as
the `responses` mocks of the tests) is read through the public API as before (`body_pieces` returns
None).
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any

from urllib3.exceptions import ProtocolError, ReadTimeoutError

__all__ = ["body_pieces"]

_MAX_LINE = 64 * 1024  # a chunk-size or trailer line (http.client allows the same)
_IDENTITY = ("", "identity")


def body_pieces(raw: Any, size: int) -> Iterator[bytes] | None:
    """The body of urllib3's streamed response `raw`, de-chunked, in the pieces the connection's reads
    bring (each at most `size` bytes of the wire); None when this path does not apply."""
    response = getattr(raw, "_fp", None)
    if not isinstance(response, http.client.HTTPResponse):
        return None
    if not response.chunked or response.chunk_left is not None:  # not chunked, or read already
        return None
    if str(raw.headers.get("Content-Encoding", "")).strip().lower() not in _IDENTITY:
        return None
    reader = response.fp
    if reader is None or not hasattr(reader, "read1"):
        return None
    return _dechunked(raw, response, reader, size)


def _dechunked(raw: Any, response: http.client.HTTPResponse, reader: Any, size: int) -> Iterator[bytes]:
    pending = b""
    pos = 0
    left = -1  # bytes of the current chunk's data still to come; -1: a size line is next
    crlf = False  # the line end after a chunk's data is next
    while True:
        try:
            data = reader.read1(size)
        except TimeoutError as exc:
            raise ReadTimeoutError(None, "", f"Read timed out. ({exc})") from exc  # type: ignore[arg-type]
        except OSError as exc:
            raise ProtocolError(f"Connection broken: {exc!r}", exc) from exc
        if not data:
            raise ProtocolError("Response ended prematurely: the chunked body was cut")
        pending = pending[pos:] + data if pos < len(pending) else data
        pos, end = 0, len(pending)
        out: list[bytes] = []
        while pos < end:
            if left > 0:  # inside a chunk's data
                take = min(left, end - pos)
                out.append(pending[pos : pos + take])
                pos += take
                left -= take
                if left == 0:
                    left, crlf = -1, True
                continue
            newline = pending.find(b"\n", pos)
            if newline < 0:
                if end - pos > _MAX_LINE:
                    raise ProtocolError("chunk-size line too long")
                break  # the rest of the line has not arrived
            line = pending[pos:newline]
            pos = newline + 1
            if crlf:  # the line end after a chunk's data
                if line.strip():
                    raise ProtocolError("chunk data longer than its size")
                crlf = False
                continue
            try:
                left = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError(f"invalid chunk size line {line[:40]!r}") from None
            if left < 0:
                raise ProtocolError("negative chunk size")
            if left == 0:  # the last chunk: then trailer lines up to a blank one
                rest = pending[pos:]
                end = _trailer_end(rest)
                if end is not None:
                    # The body's end came with its last data (the usual case): the connection goes
                    # back before that data is handed on, since whoever reads it may stop there.
                    if end == len(rest):  # and nothing follows it
                        _release(raw, response)
                    if out:
                        yield b"".join(out)
                    return
                if out:
                    yield b"".join(out)
                if _trailer_skip(reader, rest):
                    _release(raw, response)
                return
        if out:
            yield out[0] if len(out) == 1 else b"".join(out)


def _release(raw: Any, response: http.client.HTTPResponse) -> None:
    response.close()  # the body is read: http.client's response is done with the connection
    raw.release_conn()  # and urllib3's pool takes it back, as after any body read to its end


def _trailer_end(rest: bytes) -> int | None:
    """Where the trailer ends in `rest` (what follows the last chunk's size line): just past its blank
    line; None when it has not all arrived."""
    pos = 0
    while (newline := rest.find(b"\n", pos)) >= 0:
        line, pos = rest[pos:newline], newline + 1
        if not line.strip():
            return pos
    return None


def _trailer_skip(reader: Any, pending: bytes) -> bool:
    """Read the rest of the trailer after the last chunk; True when the connection is left clean for
    its next request (nothing after the trailer's blank line)."""
    while (end := _trailer_end(pending)) is None:
        if len(pending) > _MAX_LINE:
            return False
        try:
            data = reader.read1(_MAX_LINE)
        except OSError:
            return False
        if not data:
            return False  # the server closed the connection without the trailer's blank line
        pending += data
    return end == len(pending)
