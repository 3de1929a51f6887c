"""Server-sent event streams as they arrive from an upstream (the WHATWG `text/event-stream` format).

`sse_events` yields each complete event's `event` and `data` fields; every adapter that reads an
event stream parses it here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from upstreams.transport import UpstreamReply

__all__ = ["SSEEvent", "sse_events"]

# Event streams are read in pieces of whatever has arrived, up to this size (never waiting for more).
SSE_READ_BYTES = 64 * 1024
_SSE_LINE_END = re.compile(rb"\r\n|\r|\n")
_COLON, _SPACE = ord(":"), ord(" ")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One event of a stream: its `event:` field ("" when it had none) and its data lines joined with
    "\\n", exactly as received (e.g. "[DONE]" or a JSON text)."""

    event: str
    data: str


def sse_events(reply: UpstreamReply) -> Iterator[SSEEvent]:
    """The events of a streamed reply as they arrive.

    An event is dispatched at the blank line that ends it, and only when it had a data line (an event
    of comments or of an `event:` line alone yields nothing). An event the stream ends inside is not
    delivered. A failure while reading is the transport's UpstreamError (its outcome unknown).
    """
    event_type, data_lines = "", []
    for line in _sse_fields(reply):
        if line is not None:
            name, value = line
            if name == "event":
                event_type = value
            elif name == "data":
                data_lines.append(value)
            continue
        if data_lines:
            yield SSEEvent(event=event_type, data="\n".join(data_lines))
        event_type, data_lines = "", []


def _sse_fields(reply: UpstreamReply) -> Iterator[tuple[str, str] | None]:
    """The lines of an event stream as they arrive: (field, value) for a field line, None for the
    blank line that ends an event; comment lines are skipped. Lines end with CRLF, LF or CR, and the
    stream is UTF-8 (the encoding of every event stream).

    Linear in the stream's size, with each value decoded straight from the read buffer (requests'
    `iter_lines` splits everything it holds again on every read, and decodes the stream as ISO-8859-1).
    """
    buffer = bytearray()
    searched = 0  # no line end in buffer[:searched]
    bom_pending = True  # a BOM may open the stream
    for chunk in reply.chunks(SSE_READ_BYTES):
        buffer += chunk
        if bom_pending:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                continue
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
            bom_pending = False
        start = 0
        while (match := _SSE_LINE_END.search(buffer, searched)) is not None:
            if match.group() == b"\r" and match.end() == len(buffer):
                searched = match.start()  # perhaps the first half of a CRLF: decide with more data
                break
            line_start, start = start, match.end()
            searched = start
            if match.start() == line_start:
                yield None
            elif buffer[line_start] != _COLON:
                yield _sse_field(buffer, line_start, match.start())
        else:
            searched = len(buffer)
        if start:
            del buffer[:start]  # bytearray drops a prefix without moving the rest
            searched -= start
    if buffer:  # the stream ended inside a line, or after a lone CR
        end = len(buffer) - 1 if buffer.endswith(b"\r") else len(buffer)
        if end == 0:
            yield None
        elif buffer[0] != _COLON:
            yield _sse_field(buffer, 0, end)


def _sse_field(buffer: bytearray, start: int, end: int) -> tuple[str, str]:
    """(field, value) of the line buffer[start:end]; a line without a colon is a field without value."""
    colon = buffer.find(b":", start, end)
    value_start = end if colon < 0 else colon + 1
    colon = end if colon < 0 else colon
    if value_start < end and buffer[value_start] == _SPACE:
        value_start += 1
    with memoryview(buffer) as view:  # decoded in place: a large value is not copied twice
        return str(view[start:colon], "utf-8", "replace"), str(view[value_start:end], "utf-8", "replace")
