"""Server-sent event streams as they arrive from an upstream (the WHATWG `text/event-stream` format).

`sse_events` yields each complete event's `event` and `data` fields, and the bytes it came in (which
a relay passes on as they are), and on request the blocks of comments alone (keep-alives); every
adapter that reads an event stream parses it here. A reader that only needs some of the events (a
relay tracking usage) may `skim` what one read brought and take whole runs of events unparsed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from upstreams.errors import UpstreamError

if TYPE_CHECKING:
    from upstreams.transport import DirectBody, UpstreamReply

__all__ = ["SSEDirect", "SSEEvent", "SSEParser", "sse_events"]

# Event streams are read in pieces of whatever has arrived, up to this size (never waiting for more).
SSE_READ_BYTES = 64 * 1024
# The most an event may hold before its blank line: an image stream's event carries a whole image in
# base64 (GATEWAY_FETCH_MAX_BYTES is 32 MB by default); a stream that never ends its event fails
# instead of growing its buffer until the read timeout.
SSE_EVENT_MAX_BYTES = 64 * 1024 * 1024
_BOM = b"\xef\xbb\xbf"
_CR, _LF, _CRLF, _BLANK = b"\r", b"\n", b"\r\n", b"\n\n"


@dataclass(slots=True)
class SSEEvent:
    """One event of a stream: its `event:` field ("" when it had none) and its data lines joined with
    "\\n", exactly as received (e.g. "[DONE]" or a JSON text).

    `raw` is the event as it arrived, with line ends as "\\n": its lines (comments and other fields
    included) through the blank line that ends it; a block of comments alone is no event. Events made
    by the gateway have none; a relay encodes those (chat.streaming.sse_encode).

    `more` is True when the next event arrived with this one (a relay then sends them together).

    `comment` is True for a block of comments alone (`: ping`, the keep-alive some providers send while
    a model thinks), yielded only when asked for (`sse_events(..., comments=True)`): no event, but
    bytes a relay passes on so that its caller's connection does not sit idle either.

    Not frozen, for speed (a frozen dataclass sets each field through `object.__setattr__`, on
    every event of every stream), but read-only all the same: nothing changes an event once made.

    `skimmed` is True for a run of whole events that the reader's `skim` found nothing in to follow
    (`sse_events(..., skim=...)`): `raw` holds them as they arrived, unparsed, for a relay to pass on;
    `event` and `data` are empty."""

    event: str
    data: str
    raw: bytes = field(default=b"", compare=False, repr=False)
    more: bool = field(default=False, compare=False, repr=False)
    comment: bool = False
    skimmed: bool = False


def sse_events(
    reply: UpstreamReply,
    *,
    comments: bool = False,
    skim: Callable[[bytes], bool] | None = None,
    parser: SSEParser | None = None,
) -> Iterator[SSEEvent]:
    """The events of a streamed reply as they arrive, parsed by `parser` (a new SSEParser with
    `comments` and `skim` when none is given). A failure while reading is the transport's UpstreamError
    (its outcome unknown)."""
    if parser is None:
        parser = SSEParser(comments=comments, skim=skim)
    for chunk in reply.chunks(SSE_READ_BYTES):
        yield from parser.feed(chunk)
    yield from parser.end()


class SSEParser:
    """Cuts an event stream into events as its bytes arrive: `feed` each piece, `end` at the stream's
    end. It holds only the bytes of an event not yet whole, so that whoever reads the stream may change
    from one piece to the next (sse_events, or a relay reading many streams at once: SSEDirect).

    An event is dispatched at the blank line that ends it, and only when it had a data line (a block
    of an `event:` or other field alone yields nothing; a block of comments alone yields a `comment`
    SSEEvent with `comments`, else nothing). An event the stream ends inside is not delivered.

    Lines end with CRLF, LF or CR, and the stream is UTF-8 (the encoding of every event stream). Line
    ends are made "\\n" as the pieces arrive, then each event is cut at its blank line with one search
    of the buffer: the work is linear in the stream's size and done per event, not per line.

    An event not ended within SSE_EVENT_MAX_BYTES is the upstream's failure (UpstreamError, its
    outcome unknown), as a broken connection is.

    `skim`, when given, is asked about the whole events each piece completes, as one bytes object
    (line ends made "\\n"); when it answers True they come as one `skimmed` SSEEvent instead of one
    SSEEvent each: a relay that follows only some events passes the rest on without parsing them.
    """

    __slots__ = ("bom_pending", "buffer", "comments", "cr_pending", "ended", "searched", "skim")

    def __init__(self, *, comments: bool = False, skim: Callable[[bytes], bool] | None = None) -> None:
        self.buffer = bytearray()  # the start of the next event; every whole event is cut off its front
        self.searched = 0  # no blank line in buffer[:searched]
        self.cr_pending = False  # the last piece ended with CR: the first half of a CRLF, perhaps
        self.bom_pending = True  # a BOM may open the stream
        self.ended = False
        self.comments = comments
        self.skim = skim

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events `chunk`, the stream's next bytes, completes."""
        if self.cr_pending:
            chunk, self.cr_pending = _CR + chunk, False
        if _CR in chunk:
            if chunk.endswith(_CR):
                chunk, self.cr_pending = chunk[:-1], True
            chunk = chunk.replace(_CRLF, _LF).replace(_CR, _LF)
        buffer = self.buffer
        buffer += chunk
        if len(buffer) > SSE_EVENT_MAX_BYTES and buffer.find(_BLANK, self.searched) < 0:
            raise UpstreamError(
                f"upstream sent an event of more than {SSE_EVENT_MAX_BYTES} bytes",
                status=502,
                retryable=False,
                outcome_unknown=True,
            )
        if self.bom_pending:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                return []
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
            self.bom_pending = False
        searched = self.searched
        skim = self.skim
        if skim is not None and (last := buffer.rfind(_BLANK, searched)) >= 0:
            whole = bytes(buffer[: last + 2])
            if skim(whole):
                del buffer[: last + 2]
                self.searched = max(0, len(buffer) - 1)  # a blank line may begin with the last byte
                return [SSEEvent(event="", data="", raw=whole, skimmed=True)]
        arrived: list[tuple[str, str, bytes, bool]] = []
        start = 0  # the current event's first byte
        comments = self.comments
        while (end := buffer.find(_BLANK, searched)) >= 0:
            searched = end + 2
            if (fields := _sse_fields(buffer, start, end, comments)) is not None:
                arrived.append(fields)
            start = searched
        searched = max(start, len(buffer) - 1)  # a blank line may begin with the last byte
        if start:
            del buffer[:start]  # bytearray drops a prefix without moving the rest
            searched -= start
        self.searched = searched
        last = len(arrived) - 1
        return [
            SSEEvent(event=event_type, data=data, raw=raw, more=index < last, comment=comment)
            for index, (event_type, data, raw, comment) in enumerate(arrived)
        ]

    def end(self) -> list[SSEEvent]:
        """The stream has ended: a final CR ends a line, which may end the last event (once only)."""
        if self.ended or not self.cr_pending:
            self.ended = True
            return []
        self.ended, self.cr_pending = True, False
        buffer = self.buffer
        buffer += _LF
        end = buffer.find(_BLANK, self.searched)
        if end >= 0 and (fields := _sse_fields(buffer, 0, end, self.comments)) is not None:
            event_type, data, raw, comment = fields
            return [SSEEvent(event=event_type, data=data, raw=raw, comment=comment)]
        return []


class SSEDirect:
    """The rest of a stream's events read without waiting, for a relay that waits for many streams at
    once: `fd` to wait on, `read` once it is readable. Made between two pieces of sse_events (the
    adapters' `TextReply.direct`), which may take over again afterwards: both read through the same
    parser and body."""

    __slots__ = ("body", "fd", "parser")

    def __init__(self, body: DirectBody, parser: SSEParser) -> None:
        self.body = body
        self.parser = parser
        self.fd = body.fd

    def read(self) -> list[SSEEvent] | None:
        """The events one read completes (the stream's last ones too, `ended` then True); None when
        nothing has arrived. A failed read is the transport's UpstreamError (its outcome unknown)."""
        data = self.body.read()
        if data is None:
            return None
        events = self.parser.feed(data) if data else []
        if self.body.done:
            events += self.parser.end()
        return events

    @property
    def ended(self) -> bool:
        """The stream has been read to its end."""
        return self.body.done


def _sse_fields(
    buffer: bytearray, start: int, end: int, comments: bool
) -> tuple[str, str, bytes, bool] | None:
    """(event, data, raw, False) of the event whose lines are buffer[start:end] (a blank line follows
    them); when it has no data line, ("", "", raw, True) if `comments` and it had a comment line, else
    None. Comment lines (":...") and fields other than `event` and `data` are skipped; a line without
    a colon is a field without value; one space after the colon is not part of the value."""
    raw = bytes(buffer[start : end + 2])
    event_type = b""
    data_lines: list[bytes] = []
    for line in raw[:-2].split(_LF):
        if not line:  # a blank line before the event's own lines (e.g. after a comment-only event)
            event_type, data_lines = b"", []
            continue
        name, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data_lines.append(value)
        elif name == b"event":
            event_type = value
    if not data_lines:
        if comments and (raw.startswith(b":") or b"\n:" in raw):
            return "", "", raw, True
        return None
    data = data_lines[0] if len(data_lines) == 1 else _LF.join(data_lines)
    return str(event_type, "utf-8", "replace"), str(data, "utf-8", "replace"), raw, False
