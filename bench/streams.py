#!/usr/bin/env python3
"""Load client for streamed HTTP calls (server-sent events), for the benchmarks: what wrk cannot measure.

It opens --connections HTTP/1.1 keep-alive connections to one local port and, on each, sends the same
POST again and again, one request after another. Answers are server-sent event streams (a
`text/event-stream` body, usually `Transfer-Encoding: chunked`) or plain answers (JSON with a
Content-Length, say). At the end it prints one line on stdout, `BENCH_JSON {...}`, like bench/post.lua's
done(); nothing else goes to stdout (--progress writes to stderr).

    python bench/streams.py --port P --path /v1/chat/completions \\
        --body '{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}' \\
        --header 'Authorization: Bearer K' --connections 2000 --requests 4000 --ramp 2 [--timeout 60] \\
        [--duration S] [--final MARKER ...] [--error-marker MARKER ...] [--expect-events N] [--progress]
        [--samples]

--body takes JSON text, or @FILE. --header adds or replaces a request header (Content-Type defaults to
application/json). The run stops once --requests calls are done (errors included: no more are started
than that) or --duration seconds have passed (whichever comes first; at least one of the two is
needed); calls in flight at that moment are finished and counted as usual. --ramp spreads the
connections' starts evenly over that many seconds. A connection that fails or is reset is counted and
opened again; a failed connect counts as one call (so that a run against a dead port ends).

Measured per call, with time.perf_counter(); "a read" is one data_received() of the asyncio protocol
(uvloop's event loop when it is installed), and a byte's arrival time is the start of its read:

- ttfb: from just before the request's write to the arrival of the first byte of the response body
  (the de-chunked payload, so for a stream its first event's bytes; the response head is not body).
- ttlb: from the same start to the arrival of the end of the body (the last chunk, or Content-Length
  bytes).
- ttle (streams only): from the same start to the arrival of the stream's last event.
- events (streams only): an event ends at a blank line, i.e. every `\\n\\n` in the de-chunked body,
  counted left to right without overlap, also when the two newlines arrive in different chunks or
  reads (the chunk framing's own CRLFs are never counted; `\\r\\n\\r\\n` line endings are not
  recognised). An event's arrival time is the arrival time of the read that completed it.
- gaps: the time between consecutive events of one stream, as seen by the client: for each event but
  a stream's first, its arrival time minus the previous event's. Events completed by the same read
  have gaps of 0. The wait for the first event is not a gap (it is in ttfb).

A call is an error when (its kind in errors_by_kind, first matching wins):
the status is not 2xx (kind: the status code, e.g. "502"); a stream contained an --error-marker
(`error_event`; defaults `data: {"error"` and `event: error`); it ran longer than --timeout from its
write (`timeout`; the connection is dropped); the connection closed before any of the answer arrived
(`reset`) or before the body ended (`incomplete`); a stream ended without any --final marker
(`incomplete`; defaults `data: [DONE]`, `event: message_stop`, `event: response.completed`); a stream
had fewer than --expect-events events (`short`; all events count, not only content deltas); the
connection could not be opened within --timeout (`connect`); the answer could not be parsed
(`protocol`). A marker is found where a line of the de-chunked stream body starts with it (SSE field
lines: `data: [DONE]`), also when it is split across chunks or reads; --final and --error-marker, when
given, replace their defaults.

Output fields (times in ms, 3 decimals): requests (calls answered without error), errors,
errors_by_kind, duration_s (from the start to the end of the last call), rps (requests / duration_s),
ttfb_ms and ttlb_ms {p50, p90, p99, max} over the calls without error, events (all events received,
errors' included) and events_per_s (events / duration_s), gap_ms {p50, p90, p99, p999, max} over all
gaps of all streams, streams (responses that were event streams), streams_max_open (most stream
bodies being received at one time: from a response head saying text/event-stream to the body's end or
the call's failure), bytes (everything received, heads and framing included), connects (connections
opened). Percentiles are exact, nearest rank over the sorted samples; null when there is none.
With --samples it also carries `samples`: {ttfb, ttlb, ttle, gaps}, every sample in ms, so that the
results of several runs can be merged exactly (bench/run.py's interleaved rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import resource
import signal
import socket
import sys
from array import array
from collections import Counter
from pathlib import Path
from time import perf_counter
from typing import Any

DEFAULT_FINAL = ("data: [DONE]", "event: message_stop", "event: response.completed")
DEFAULT_ERROR = ('data: {"error"', "event: error")
MAX_HEAD = 65536
MAX_LINE = 4096
RECONNECT_PAUSE = 0.05  # seconds after a failed connect before the next attempt

# Parser states: no call in flight; the response head; a chunk-size line; chunk data; the CRLF after
# chunk data; trailer lines after the last chunk; a Content-Length body; a body ended by the close.
IDLE, HEAD, CHUNK_SIZE, CHUNK_DATA, CHUNK_CRLF, CHUNK_TRAILER, LENGTH, UNTIL_CLOSE = range(8)


class Run:
    """The run's settings, counters and samples, shared by every connection."""

    def __init__(self, args: argparse.Namespace, request: bytes) -> None:
        self.host, self.port = args.host, args.port
        self.request = request
        self.max_requests: int | None = args.requests
        self.timeout: float = args.timeout
        self.expect_events: int = args.expect_events or 0
        self.finals = tuple(m.encode() for m in args.final)
        self.error_markers = tuple(m.encode() for m in args.error_marker)
        # A newline, then an error marker (group 1) or a final one (group 2).
        alternatives = [b"|".join(re.escape(m) for m in group) for group in (self.error_markers, self.finals)]
        self.markers = re.compile(b"\n(?:(%s)|(%s))" % tuple(alternatives))
        self.keep = max(len(m) for m in (*self.finals, *self.error_markers))  # newline + all but one byte
        self.one_line = not any(b"\n" in m for m in (*self.finals, *self.error_markers))
        self.started = 0  # calls started (connect failures included)
        self.stopping = False  # --duration passed, or interrupted: start nothing new
        self.interrupted = False
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.ttfb = array("d")
        self.ttlb = array("d")
        self.ttle = array("d")
        self.gaps = array("d")
        self.events = 0
        self.streams = 0
        self.open_streams = 0
        self.streams_max_open = 0
        self.bytes = 0
        self.connects = 0
        self.busy: set[Conn] = set()  # connections with a call in flight
        self.conns: set[Conn] = set()

    def may_start(self) -> bool:
        return not self.stopping and (self.max_requests is None or self.started < self.max_requests)

    def fail(self, kind: str) -> None:
        self.errors[kind] += 1


class Conn(asyncio.Protocol):
    """One keep-alive connection: writes a call, parses its answer, writes the next."""

    __slots__ = (
        "body_left", "chunk_left", "closed", "dangling", "error_seen", "final_seen", "first_body", "head",
        "keep_alive", "last_event", "nevents", "partial", "run", "state", "status", "stream", "t0", "tail",
        "transport",
    )  # fmt: skip

    def __init__(self, run: Run, closed: asyncio.Future) -> None:
        self.run = run
        self.closed = closed
        self.transport: asyncio.Transport | None = None
        self.state = IDLE
        self.t0 = 0.0

    # -- connection events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.run.connects += 1
        self.run.conns.add(self)
        self.next_call()

    def connection_lost(self, exc: Exception | None) -> None:
        run = self.run
        run.conns.discard(self)
        state = self.state
        if state == IDLE:
            pass
        elif run.interrupted:
            self.drop()
        elif state == UNTIL_CLOSE:
            self.finish(perf_counter())  # a body delimited by the connection's end
        elif state == HEAD and not self.head:
            self.end_call("reset")
        else:
            self.end_call("incomplete")
        if not self.closed.done():
            self.closed.set_result(None)

    # -- calls

    def next_call(self) -> None:
        run = self.run
        if not run.may_start():
            self.state = IDLE
            self.transport.close()
            return
        run.started += 1
        self.state = HEAD
        self.head = bytearray()
        self.status = 0
        self.stream = False
        self.keep_alive = True
        self.first_body = 0.0
        self.last_event = 0.0
        self.nevents = 0
        self.dangling = 0
        self.error_seen = False
        self.final_seen = False
        self.tail = b"\n"  # the body starts a line
        self.partial = b""
        self.chunk_left = 0
        self.body_left = 0
        run.busy.add(self)
        self.t0 = perf_counter()
        self.transport.write(run.request)

    def drop(self) -> None:
        """The call leaves the books (interrupted run): neither answered nor an error."""
        run = self.run
        run.busy.discard(self)
        if self.stream:
            run.open_streams -= 1
        self.state = IDLE

    def end_call(self, failure: str | None, now: float = 0.0) -> None:
        """Book the call: `failure` is why it broke off (None: the body ended)."""
        run = self.run
        run.busy.discard(self)
        if self.stream:
            run.open_streams -= 1
        status = self.status
        if status and not 200 <= status < 300:
            kind = str(status)
        elif self.error_seen:
            kind = "error_event"
        elif failure:
            kind = failure
        elif self.stream and not self.final_seen:
            kind = "incomplete"
        elif self.stream and self.nevents < run.expect_events:
            kind = "short"
        else:
            kind = ""
        if kind:
            run.fail(kind)
        else:
            run.ok += 1
            run.ttfb.append(self.first_body - self.t0)
            run.ttlb.append(now - self.t0)
            if self.stream and self.last_event:
                run.ttle.append(self.last_event - self.t0)
        self.state = IDLE

    def finish(self, now: float) -> None:
        """The body ended: book the call, then start the next one (or close)."""
        if self.first_body == 0.0:
            self.first_body = now  # an empty body: its first byte is its end
        self.end_call(None, now)
        if self.keep_alive and not self.transport.is_closing():
            self.next_call()
        else:
            self.transport.close()

    def abort(self, kind: str) -> None:
        self.end_call(kind)
        self.transport.abort()

    # -- parsing

    def data_received(self, data: bytes) -> None:
        now = perf_counter()
        self.run.bytes += len(data)
        state = self.state
        if state == CHUNK_SIZE and not self.partial:
            # The usual read of a stream: exactly one whole chunk ("size CRLF data CRLF").
            i = data.find(b"\r\n")
            if i > 0:
                try:
                    end = i + 2 + int(data[:i], 16)
                except ValueError:
                    end = 0
                if end > i + 2 and len(data) == end + 2 and data.endswith(b"\r\n"):
                    self.piece(data[i + 2 : end], now)
                    return
            self.chunked(data, now)
        elif CHUNK_SIZE <= state <= CHUNK_TRAILER:
            self.chunked(data, now)
        elif state == HEAD:
            self.head_received(data, now)
        elif state == LENGTH:
            self.length_body(data, now)
        elif state == UNTIL_CLOSE:
            self.piece(data, now)
        # IDLE: bytes nobody asked for (after an answer's end) are ignored

    def head_received(self, data: bytes, now: float) -> None:
        head = self.head
        searched = max(0, len(head) - 3)
        head += data
        end = head.find(b"\r\n\r\n", searched)
        if end < 0:
            if len(head) > MAX_HEAD:
                self.abort("protocol")
            return
        rest = bytes(head[end + 4 :])
        lines = head[:end].decode("latin-1").split("\r\n")
        try:
            version, code = lines[0].split(" ", 2)[:2]
            status = int(code)
        except ValueError:
            self.abort("protocol")
            return
        if 100 <= status < 200 and status != 101:  # an interim answer: the real one follows
            self.head = bytearray()
            if rest:
                self.head_received(rest, now)
            return
        self.status = status
        length, chunked, stream = None, False, False
        keep_alive = version == "HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                try:
                    length = int(value)
                except ValueError:
                    self.abort("protocol")
                    return
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "content-type":
                stream = value.strip().lower().startswith("text/event-stream")
            elif name == "connection":
                option = value.strip().lower()
                keep_alive = option != "close" and (keep_alive or option == "keep-alive")
        self.keep_alive = keep_alive
        if stream:
            run = self.run
            self.stream = True
            run.streams += 1
            run.open_streams += 1
            if run.open_streams > run.streams_max_open:
                run.streams_max_open = run.open_streams
        if status in (204, 304):
            self.finish(now)
        elif chunked:
            self.state = CHUNK_SIZE
            if rest:
                self.chunked(rest, now)
        elif length is not None:
            if length == 0:
                self.finish(now)
                return
            self.state = LENGTH
            self.body_left = length
            if rest:
                self.length_body(rest, now)
        else:
            self.state = UNTIL_CLOSE
            self.keep_alive = False
            if rest:
                self.piece(rest, now)

    def length_body(self, data: bytes, now: float) -> None:
        left = self.body_left
        if len(data) < left:
            self.body_left = left - len(data)
            self.piece(data, now)
        else:
            self.piece(data[:left] if len(data) > left else data, now)
            self.finish(now)

    def chunked(self, data: bytes, now: float) -> None:
        if self.partial:
            data = self.partial + data
            self.partial = b""
        pos, size = 0, len(data)
        state = self.state
        while pos < size:
            if state == CHUNK_DATA:
                end = pos + self.chunk_left
                if end > size:
                    self.piece(data[pos:] if pos else data, now)
                    self.chunk_left = end - size
                    return
                self.piece(data[pos:end], now)
                if data.startswith(b"\r\n", end):
                    pos, state = end + 2, CHUNK_SIZE
                else:
                    pos, state = end, CHUNK_CRLF
                self.state = state
                continue
            newline = data.find(b"\n", pos)
            if newline < 0:
                self.partial = data[pos:]
                if len(self.partial) > MAX_LINE:
                    self.abort("protocol")
                return
            line = data[pos:newline]
            pos = newline + 1
            if state == CHUNK_SIZE:
                try:
                    length = int(line, 16)
                except ValueError:
                    try:
                        length = int(line.split(b";", 1)[0], 16)
                    except ValueError:
                        self.abort("protocol")
                        return
                if length > 0:
                    self.chunk_left, state = length, CHUNK_DATA
                elif length == 0:
                    state = CHUNK_TRAILER
                else:
                    self.abort("protocol")
                    return
            elif state == CHUNK_CRLF:
                if line not in (b"\r", b""):
                    self.abort("protocol")
                    return
                state = CHUNK_SIZE
            elif line in (b"\r", b""):  # CHUNK_TRAILER: a blank line ends the body
                self.finish(now)
                return
            self.state = state

    def piece(self, piece: bytes, now: float) -> None:
        """A run of body bytes (de-chunked, never empty) that arrived at `now`."""
        if not self.first_body:
            self.first_body = now
        if not self.stream:
            return
        run = self.run
        # Events: blank lines, i.e. "\n\n" pairs counted left to right without overlap. `dangling`: the
        # body so far ends with a newline not yet paired, which a newline at the start of this piece pairs.
        if self.dangling and piece[0] == 10:
            start = 1
            count = 1 + piece.count(b"\n\n", 1)
        else:
            start = 0
            count = piece.count(b"\n\n")
        if piece[-1] == 10:  # the parity of the run of newlines the piece ends with (from `start`)
            end = piece[-16:]
            kept = len(end.rstrip(b"\n"))
            kept = len(piece) - len(end) + kept if kept or len(piece) <= 16 else len(piece.rstrip(b"\n"))
            self.dangling = (len(piece) - (kept if kept > start else start)) & 1
        elif self.dangling:
            self.dangling = 0
        if count:
            if self.nevents:
                run.gaps.append(now - self.last_event)
            if count > 1:  # events completed by the same read: gaps of 0
                run.gaps.frombytes(bytes(8 * (count - 1)))
            self.nevents += count
            run.events += count
            self.last_event = now
        # Markers: one search for a newline followed by any of them, over `tail` + piece. `tail`: the last
        # bytes of the body so far, enough to hold a newline and a marker's beginning (just "\n" when the
        # body so far ends a line; the body's start counts as one).
        text = self.tail + piece
        if run.markers.search(text) is not None:
            for match in run.markers.finditer(text):
                if match.lastindex == 1:
                    self.error_seen = True
                else:
                    self.final_seen = True
        if run.one_line and piece[-1] == 10:
            self.tail = b"\n"
        else:
            self.tail = text[-run.keep :]


# --------------------------------------------------------------------------------------------------


def build_request(args: argparse.Namespace) -> bytes:
    body = args.body
    body_bytes = Path(body[1:]).read_bytes() if body.startswith("@") else body.encode()
    headers: dict[str, tuple[str, str]] = {
        "host": ("Host", f"{args.host}:{args.port}"),
        "content-type": ("Content-Type", "application/json"),
    }
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise SystemExit(f"bad --header {header!r}: expected 'Name: value'")
        headers[name.strip().lower()] = (name.strip(), value.strip())
    headers["content-length"] = ("Content-Length", str(len(body_bytes)))
    head = f"POST {args.path} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers.values()) + "\r\n"
    return head.encode("latin-1") + body_bytes


def percentiles(samples: array, points: tuple[tuple[str, float], ...]) -> dict[str, float | None]:
    """Exact nearest-rank percentiles of samples in seconds, in ms."""
    if not samples:
        return {name: None for name, _ in points} | {"max": None}
    ordered = sorted(samples)
    n = len(ordered)
    result: dict[str, float | None] = {}
    for name, p in points:
        rank = max(1, math.ceil(p / 100 * n))
        result[name] = round(ordered[rank - 1] * 1000, 3)
    result["max"] = round(ordered[-1] * 1000, 3)
    return result


LATENCY_POINTS = (("p50", 50), ("p90", 90), ("p99", 99))
GAP_POINTS = (*LATENCY_POINTS, ("p999", 99.9))


async def slot(run: Run, delay: float) -> None:
    """One of the --connections: connect, serve calls until the run stops, reconnect when dropped."""
    loop = asyncio.get_running_loop()
    if delay > 0:
        await asyncio.sleep(delay)
    while run.may_start():
        closed = loop.create_future()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda closed=closed: Conn(run, closed), run.host, run.port),
                run.timeout,
            )
        except (OSError, TimeoutError):
            if not run.may_start():
                return
            run.started += 1
            run.fail("connect")
            await asyncio.sleep(RECONNECT_PAUSE)
            continue
        await closed


async def watchdog(run: Run) -> None:
    """Drop calls that have run for longer than --timeout."""
    period = min(1.0, max(0.05, run.timeout / 10))
    while True:
        await asyncio.sleep(period)
        limit = perf_counter() - run.timeout
        for conn in [conn for conn in run.busy if conn.t0 < limit]:
            conn.abort("timeout")


async def progress(run: Run, started: float) -> None:
    last_events, last_time = 0, started
    while True:
        await asyncio.sleep(1.0)
        now = perf_counter()
        rate = (run.events - last_events) / (now - last_time)
        last_events, last_time = run.events, now
        errors = sum(run.errors.values())
        print(
            f"[streams {now - started:7.1f}s] ok {run.ok} errors {errors} in flight {len(run.busy)}"
            f" streams open {run.open_streams} events/s {rate:,.0f}",
            file=sys.stderr,
            flush=True,
        )


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    run = Run(args, build_request(args))

    def interrupt() -> None:
        run.stopping = run.interrupted = True
        for conn in list(run.conns):
            if conn.transport is not None:
                conn.transport.abort()

    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, interrupt)
    started = perf_counter()
    helpers = [asyncio.ensure_future(watchdog(run))]
    if args.progress:
        helpers.append(asyncio.ensure_future(progress(run, started)))
    if args.duration is not None:
        loop.call_later(args.duration, lambda: setattr(run, "stopping", True))
    step = args.ramp / args.connections if args.ramp > 0 else 0.0
    slots = [asyncio.ensure_future(slot(run, i * step)) for i in range(args.connections)]
    try:
        await asyncio.gather(*slots)
    finally:
        for task in helpers:
            task.cancel()
    duration = perf_counter() - started
    errors = sum(run.errors.values())
    result: dict[str, Any] = {
        "requests": run.ok,
        "errors": errors,
        "errors_by_kind": dict(sorted(run.errors.items())),
        "duration_s": round(duration, 3),
        "rps": round(run.ok / duration, 2) if duration > 0 else 0.0,
        "ttfb_ms": percentiles(run.ttfb, LATENCY_POINTS),
        "ttlb_ms": percentiles(run.ttlb, LATENCY_POINTS),
        "ttle_ms": percentiles(run.ttle, LATENCY_POINTS),
        "events": run.events,
        "events_per_s": round(run.events / duration, 1) if duration > 0 else 0.0,
        "gap_ms": percentiles(run.gaps, GAP_POINTS),
        "streams": run.streams,
        "streams_max_open": run.streams_max_open,
        "bytes": run.bytes,
        "connects": run.connects,
        "connections": args.connections,
        "interrupted": run.interrupted,
    }
    if args.samples:
        result["samples"] = {
            name: [round(value * 1000, 3) for value in getattr(run, name)]
            for name in ("ttfb", "ttlb", "ttle", "gaps")
        }
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Load client for streamed (SSE) HTTP calls; prints one BENCH_JSON line."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--body", default="", help="the POST body (JSON text), or @FILE")
    parser.add_argument("--header", action="append", default=[], help="'Name: value' (repeatable)")
    parser.add_argument("--connections", "-c", type=int, default=1)
    parser.add_argument("--requests", "-n", type=int, help="stop after this many calls (errors included)")
    parser.add_argument("--duration", "-d", type=float, help="stop starting calls after this many seconds")
    parser.add_argument("--ramp", type=float, default=0.0, help="seconds over which the connections start")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a call (or a connect) may take")
    parser.add_argument("--final", action="append", help="a marker that ends a stream well (repeatable)")
    parser.add_argument("--error-marker", action="append", help="a marker of an error event (repeatable)")
    parser.add_argument("--expect-events", type=int, default=0, help="fewer events in a stream: an error")
    parser.add_argument("--progress", action="store_true", help="a line per second on stderr")
    parser.add_argument("--samples", action="store_true", help="also print every sample (for merging runs)")
    args = parser.parse_args(argv)
    if args.requests is None and args.duration is None:
        parser.error("give --requests or --duration (or both)")
    if args.connections < 1:
        parser.error("--connections must be at least 1")
    if args.requests is not None and args.requests < 1:
        parser.error("--requests must be at least 1")
    args.final = args.final or list(DEFAULT_FINAL)
    args.error_marker = args.error_marker or list(DEFAULT_ERROR)
    return args


def raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_fd_limit(args.connections + 64)
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(main_async(args))
    else:
        result = uvloop.run(main_async(args))
    sys.stdout.write("BENCH_JSON " + json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 130 if result["interrupted"] else 0


if __name__ == "__main__":
    sys.exit(main())
