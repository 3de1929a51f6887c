"""A streamed upstream body read as it arrives, one piece per socket read, however many HTTP chunks
that read holds: the read path of event streams (upstreams/sse.py).

This is the one module that reaches past the public API of urllib3 and http.client
(docs/architecture.md, "The complexity budget"). Through their public API, a chunked body is read one HTTP
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
- for a reader that waits for many connections at once (`ChunkedBody.direct`, the stream loop of
  api/stream_loop.py): http.client's `HTTPConnection.sock`, reached through urllib3's public
  `HTTPResponse.connection`, whose timeout is set to 0 for one `read1` that takes what the buffered
  reader holds; then the socket's descriptor is read directly.

Anything else (a body not chunked, or content-encoded, or a response that is not urllib3's, such as
the `responses` mocks of the tests) is read through urllib3's and requests' public API (`chunked_body`
returns None).
"""

from __future__ import annotations

import http.client
import os
import select
import time
from collections.abc import Iterator
from typing import Any

from urllib3.exceptions import ProtocolError, ReadTimeoutError

__all__ = ["ChunkedBody", "SocketBody", "chunked_body"]

_MAX_LINE = 64 * 1024  # a chunk-size or trailer line (http.client allows the same)
_IDENTITY = ("", "identity")
_END_READ = 4096  # what the body's end takes on the wire, with room for a trailer


def chunked_body(raw: Any) -> ChunkedBody | None:
    """The chunked body of urllib3's streamed response `raw`, to be read as the connection's reads
    bring it (`ChunkedBody.pieces`); None when this path does not apply."""
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
    return ChunkedBody(raw, response, reader)


class ChunkedBody:
    """A chunked body undone as its bytes arrive. `pieces` reads them through http.client's buffered
    reader, waiting as the connection's socket waits; `direct` hands the rest of the body to a reader
    that waits for many sockets at once and reads this one only when it has something
    (api/stream_loop.py); whichever reads, the framing's state is this object's, so the two can take
    turns."""

    def __init__(self, raw: Any, response: http.client.HTTPResponse, reader: Any) -> None:
        self.raw = raw
        self.response = response
        self.reader = reader
        self.pending = b""  # the start of a size or trailer line whose end has not arrived
        self.left = -1  # bytes of the current chunk's data still to come; -1: a size line is next
        self.crlf = False  # the line end after a chunk's data is next
        self.trailer: bytes | None = None  # after the last chunk: what has arrived of the trailer
        self.done = False  # the body has been read to its end
        self.reusable = False  # and nothing followed it on the connection
        self.released = False  # the connection has gone back to the pool

    def pieces(self, size: int) -> Iterator[bytes]:
        """The body, de-chunked, one piece per read of the connection (each read at most `size`
        bytes of the wire). At the body's end the connection goes back to the pool before the last
        piece is handed on, since whoever reads it may stop there."""
        reader = self.reader
        while not self.done:
            try:
                data = reader.read1(size)
            except TimeoutError as exc:
                raise ReadTimeoutError(None, "", f"Read timed out. ({exc})") from exc  # type: ignore[arg-type]
            except OSError as exc:
                raise ProtocolError(f"Connection broken: {exc!r}", exc) from exc
            payload = self.feed(data)
            if self.done:
                self.release()
            if payload:
                yield payload
        self.release()  # the end was read directly (`direct`)

    def release(self) -> None:
        """Once the body is read to its end with nothing after it: the connection goes back to the
        pool, as urllib3 does itself when it reads a body to its end (once). Called by `pieces` and
        by the reply's `close`, never by `direct`'s reads: the pool's lock is gevent's, and the
        stream loop's reader may not wait."""
        if self.done and self.reusable and not self.released:
            self.released = True
            _release(self.raw, self.response)

    def feed(self, data: bytes) -> bytes:
        """The body's bytes in `data`, the next bytes of the wire (b"": the connection closed). At the
        body's end `done` is set, and `reusable` when nothing follows the body on the connection."""
        if not data:
            if self.trailer is None:
                raise ProtocolError("Response ended prematurely: the chunked body was cut")
            self.done = True  # closed inside the trailer: the body is whole, the connection not reused
            return b""
        if self.trailer is not None:
            self._trailer_add(data)
            return b""
        pending = self.pending + data if self.pending else data
        pos, end = 0, len(pending)
        left = self.left
        out: list[bytes] = []
        while pos < end:
            if left > 0:  # inside a chunk's data
                take = min(left, end - pos)
                out.append(pending[pos : pos + take])
                pos += take
                left -= take
                if left == 0:
                    left, self.crlf = -1, True
                continue
            newline = pending.find(b"\n", pos)
            if newline < 0:
                if end - pos > _MAX_LINE:
                    raise ProtocolError("chunk-size line too long")
                break  # the rest of the line has not arrived
            line = pending[pos:newline]
            pos = newline + 1
            if self.crlf:  # the line end after a chunk's data
                if line.strip():
                    raise ProtocolError("chunk data longer than its size")
                self.crlf = False
                continue
            try:
                left = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError(f"invalid chunk size line {line[:40]!r}") from None
            if left < 0:
                raise ProtocolError("negative chunk size")
            if left == 0:  # the last chunk: then trailer lines up to a blank one
                self.pending, self.left = b"", 0
                self._trailer_add(pending[pos:], first=True)
                return b"".join(out)
        self.left = left
        self.pending = pending[pos:] if pos < end else b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _trailer_add(self, data: bytes, *, first: bool = False) -> None:
        trailer = data if first else (self.trailer or b"") + data
        self.trailer = trailer
        end = _trailer_end(trailer)
        if end is None:
            if len(trailer) > _MAX_LINE:  # not a trailer: the body is whole, the connection not reused
                self.done = True
            return
        self.done = True
        self.reusable = end == len(trailer)  # nothing follows the body on the connection

    def end_await(self, timeout: float) -> None:
        """After a stream's final event, where its reader stopped: read on for at most `timeout`
        seconds while what comes is the body's end (the last chunk and its trailer, which a provider
        writes with its final event or just after it), so that `release` gives the connection back
        instead of it being dropped. More data (an event after the final one), or nothing in time:
        stop with the body unfinished, and the connection is dropped with the reply. Waits
        in `select.poll` (no limit on the descriptor's number, unlike `select.select`), which gevent
        makes cooperative in its workers."""
        if self.done:
            return
        body = self.direct(_END_READ)
        if body is None:
            return
        poller = select.poll()
        poller.register(body.fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while not self.done:
            if not body.buffered:  # wait until the socket has something, never in a read
                left = deadline - time.monotonic()
                if left <= 0 or not poller.poll(left * 1000):
                    return
            if body.read(_END_READ):
                return  # more of the body than its end

    def direct(self, size: int) -> SocketBody | None:
        """The rest of the body read straight from the connection's socket, without waiting (the
        socket must not block: gevent's never do); None when the body is read or the socket unknown.
        What the buffered reader holds already is taken first, read without waiting. `pieces` may
        read on afterwards (and gives the connection back at the body's end)."""
        if self.done:
            return None
        sock = getattr(getattr(self.raw, "connection", None), "sock", None)  # urllib3's public `connection`
        if sock is None:
            return None
        timeout = sock.gettimeout()
        sock.settimeout(0.0)
        try:
            buffered = self.reader.read1(size) or b""  # b"": nothing buffered, nothing arrived
        except OSError:
            buffered = b""  # the socket's own read, in SocketBody.read, says what failed
        finally:
            sock.settimeout(timeout)
        return SocketBody(self, sock.fileno(), buffered)


class SocketBody:
    """The rest of a ChunkedBody, read one `os.read` of its socket at a time (ChunkedBody.direct)."""

    __slots__ = ("body", "buffered", "fd")

    def __init__(self, body: ChunkedBody, fd: int, buffered: bytes) -> None:
        self.body = body
        self.fd = fd
        self.buffered = buffered  # read from the socket before, not yet de-chunked

    def read(self, size: int) -> bytes | None:
        """The body's bytes one read brings (b"" when they were framing only), None when nothing has
        arrived. At the body's end `body.done` is True."""
        if self.buffered:
            data, self.buffered = self.buffered, b""
        else:
            try:
                data = os.read(self.fd, size)
            except BlockingIOError:
                return None
            except OSError as exc:
                raise ProtocolError(f"Connection broken: {exc!r}", exc) from exc
        return self.body.feed(data)


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
