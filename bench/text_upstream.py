"""The benchmarks' fake text upstream: OpenAI chat completions and responses and Anthropic messages,
streamed at a fixed pace to thousands of clients at once, on one asyncio event loop (uvloop when it is
installed) bound to 127.0.0.1.

    python -m bench.text_upstream --port 0 [--latency S] [--ttft S] [--events N] [--interval S]

--latency: seconds before a non-streamed answer (default 0: answered at once). --ttft: seconds from a
streamed request to its response head and first delta (default 0). --events: content deltas per answer
(default 50). --interval: seconds between deltas (default 0.01). The headers `x-bench-events`,
`x-bench-ttft` and `x-bench-interval` override the last three per request. It prints `listening on PORT`
once ready.

Paths (wire formats from upstreams/text_shapes.py, which the official SDKs parse; any
Authorization or x-api-key is accepted):
- POST /v1/chat/completions, /v1/responses, /v1/messages: the answer, streamed (server-sent events in
  a chunked body) when the body says `"stream": true`. Chat streams end with a usage-only chunk when
  `stream_options.include_usage` is true, then `data: [DONE]`.
- POST /v1/messages/count_tokens: `{"input_tokens": n}`.
- GET /_stats: `requests` (every request but /_stats ones), `streams_started`, `streams_finished`,
  `events_sent` (content deltas written), `streams_open` (live count) and `tick_lateness_ms` (p50, p99,
  max of how late every scheduled write was against its schedule, in 10 µs bins). POST /_stats/reset
  zeroes all of it but `streams_open`.

Answers are deterministic: the deltas are "tok " and "ken " in turn (one output token each; a peer
that refuses a stream repeating one chunk, as LiteLLM's proxy does after 100, takes it); output
tokens = deltas = N, or the request's `max_completion_tokens` / `max_tokens` / `max_output_tokens`
when smaller (at least 1), marked truncated (finish_reason "length", status "incomplete", stop_reason
"max_tokens"). Input tokens = tests.fake_text_upstream.input_tokens_for (3 + ceil(characters of the
request's text / 4)). Cache counts are 0.

Timing of a stream: the response head, the opening events and the first delta in one write at
request + ttft; delta k at request + ttft + k * interval; the closing events and the last chunk in one
write at request + ttft + N * interval. One scheduler serves every stream: buckets of the writes due
in the same millisecond, one timer armed for the earliest bucket. The bytes of an answer are encoded
once for all the requests that get the same answer (ids aside, filled in per request), and a stream's
writes go straight to its socket.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import math
import os
import resource
import socket
import sys
import time
from typing import Any

from tests.fake_text_upstream import error_body, input_tokens_for
from upstreams import text_shapes

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
TEXT_PATHS = (CHAT, RESPONSES, MESSAGES, COUNT_TOKENS)
DELTA = "tok "
DELTAS = (DELTA, "ken ")  # delta k is DELTAS[k % 2]
DELTA_EVENTS = ("response.output_text.delta", "content_block_delta")
ID = "########"  # in every id of an encoded answer; each request's number (8 digits) replaces it
ID_BYTES = ID.encode()
CACHE_SIZE = 1024
MAX_HEAD = 65536
BIN_SECONDS = 1e-5  # lateness histogram resolution
BINS_PER_SECOND = 1 / BIN_SECONDS
BINS = 200_000  # up to 2 s; later writes land in the last bin (the max is kept exactly)
TICK_MS = 5  # a tick writes the buckets due when it began, until it has taken this long

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    501: "Not Implemented",
}
monotonic = time.monotonic


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def sse_data(value: Any) -> bytes:
    """An unnamed event of one data line: a chat chunk on the wire."""
    return b"data: " + _json(value) + b"\n\n"


def sse_named(value: dict[str, Any]) -> bytes:
    """An event named by its `type`, with one data line: a responses or messages event on the wire."""
    return b"event: " + value["type"].encode() + b"\ndata: " + _json(value) + b"\n\n"


def _json_response(status: int, body: Any, close: bool) -> bytes:
    payload = _json(body)
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(payload)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    return head.encode() + payload


def _stream_head(close: bool) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n" + (b"Connection: close\r\n" if close else b"") + b"\r\n"
    )


class Stats:
    def __init__(self) -> None:
        self.streams_open = 0
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.streams_started = 0
        self.streams_finished = 0
        self.events_sent = 0
        self.lateness = [0] * BINS
        self.lateness_max = 0.0

    def as_json(self) -> dict[str, Any]:
        counts = self.lateness
        total = sum(counts)

        def percentile(fraction: float) -> float:
            if not total:
                return 0.0
            rank, seen = math.ceil(total * fraction), 0
            for index, count in enumerate(counts):
                seen += count
                if seen >= rank:
                    return round(min((index + 1) * BIN_SECONDS, self.lateness_max) * 1000, 3)
            return round(self.lateness_max * 1000, 3)

        return {
            "requests": self.requests,
            "streams_started": self.streams_started,
            "streams_finished": self.streams_finished,
            "events_sent": self.events_sent,
            "streams_open": self.streams_open,
            "tick_lateness_ms": {
                "p50": percentile(0.5),
                "p99": percentile(0.99),
                "max": round(self.lateness_max * 1000, 3),
            },
        }


class Scheduler:
    """Every timed write of the process: items (streams, delayed answers) in buckets by the millisecond
    they are due (rounded up, so nothing is written early), one timer armed for the earliest bucket."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.buckets: dict[int, list[Any]] = {}
        self.keys: list[int] = []  # heap of the buckets' milliseconds
        self.timer: asyncio.TimerHandle | None = None
        self.timer_key: int | None = None
        self.ticking = False

    def add(self, item: Any) -> None:
        key = int(item.due * 1000) + 1  # a millisecond after it is due (never before)
        bucket = self.buckets.get(key)
        if bucket is not None:
            bucket.append(item)
            return
        self.buckets[key] = [item]
        heapq.heappush(self.keys, key)
        if not self.ticking and (self.timer_key is None or key < self.timer_key):
            self._arm(key)

    def _arm(self, key: int) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_key = key
        # In whole milliseconds, rounded up: uvloop's timers round to the millisecond, and one that fired
        # before the bucket is due would only be armed again, at once, until it is.
        delay = math.ceil(max(key - monotonic() * 1000, 0.0)) / 1000
        self.timer = asyncio.get_running_loop().call_later(delay, self._tick)

    def _tick(self) -> None:
        """Write every due bucket. The usual write, a stream's next delta, is inlined here (no call but
        os.write); the rest (first and last writes, templated deltas, delayed answers) is item.fire()."""
        self.timer = self.timer_key = None
        self.ticking = True
        stats, keys, buckets = self.stats, self.keys, self.buckets
        heappush, heappop, write = heapq.heappush, heapq.heappop, os.write
        lateness, last_bin, late_max, events = stats.lateness, BINS - 1, stats.lateness_max, 0
        # Only what was due when the tick began, for TICK_MS at most: the loop reads and accepts in
        # between, and a tick that fell behind catches up over several.
        limit = monotonic() * 1000
        try:
            while keys and keys[0] <= limit and monotonic() * 1000 < limit + TICK_MS:
                last_key, last_bucket = -1, []
                for item in buckets.pop(heappop(keys)):
                    if item.dead:
                        continue
                    late = monotonic() - item.due
                    index = int(late * BINS_PER_SECOND)
                    lateness[index if index < last_bin else last_bin] += 1
                    if late > late_max:
                        late_max = late
                    deltas, sent = item.delta, item.sent
                    try:
                        if deltas is not None and 0 < sent < item.n:
                            delta = deltas[sent & 1]
                            fd = item.fd  # item.send(delta), inlined
                            if fd < 0:
                                item.write(delta)
                            else:
                                try:
                                    written = write(fd, delta)
                                except BlockingIOError:
                                    written = 0
                                if written != len(delta):
                                    item.spill(delta[written:])
                            item.sent = sent = sent + 1
                            events += 1
                            due = item.due = item.start + sent * item.interval
                        elif item.fire():
                            due = item.due
                        else:
                            continue
                    except Exception:  # the client went away (a write failed): drop its connection
                        item.drop()
                        item.conn.abort()
                        continue
                    key = int(due * 1000) + 1
                    if key != last_key:
                        last_key, last_bucket = key, buckets.get(key)
                        if last_bucket is None:
                            last_bucket = buckets[key] = []
                            heappush(keys, key)
                    last_bucket.append(item)
        finally:
            stats.events_sent += events
            stats.lateness_max = late_max
            self.ticking = False
            if keys:
                self._arm(keys[0])


class Reply:
    """A non-streamed answer held back `--latency` seconds."""

    __slots__ = ("conn", "data", "dead", "due")
    delta = None  # as a Stream's fields, for the scheduler's fast path
    sent = n = 0

    def __init__(self, conn: Connection, data: bytes, due: float) -> None:
        self.conn, self.data, self.due, self.dead = conn, data, due, False

    def fire(self) -> bool:
        self.conn.answer(self.data)
        return False

    def drop(self) -> None:
        self.dead = True


class Stream:
    """One streamed answer: its writes (an Encoded answer with its id filled in), made by the scheduler.

    Writes go straight to the socket (os.write: one system call, none of the transport's bookkeeping)
    while the kernel takes them whole; once it does not, the transport buffers the rest and takes every
    later write of the stream, so the order holds. (Both asyncio and uvloop close a transport's socket
    only after connection_lost, which marks the stream dead: its fd is never another connection's.)"""

    __slots__ = (
        "closing",
        "conn",
        "dead",
        "delta",
        "delta_prefix",
        "delta_suffix",
        "due",
        "fd",
        "fixed",
        "interval",
        "n",
        "opening",
        "sent",
        "seq",
        "start",
        "stats",
        "write",
    )

    def __init__(
        self, conn: Connection, start: float, interval: float, encoded: Encoded, number: bytes
    ) -> None:
        self.conn, self.stats, self.write = conn, conn.stats, conn.transport.write
        self.fd = conn.fd if conn.transport.get_write_buffer_size() == 0 else -1
        self.start, self.interval, self.n, self.due = start, interval, encoded.n, start
        self.sent, self.dead = 0, False
        self.opening = encoded.opening.replace(ID_BYTES, number)
        self.closing = encoded.closing.replace(ID_BYTES, number)
        # The two delta chunks, taken in turn, or (responses) a template:
        self.delta = encoded.delta and tuple(delta.replace(ID_BYTES, number) for delta in encoded.delta)
        self.seq = encoded.seq  # responses: the first delta's sequence_number, formatted into a template
        self.delta_prefix = tuple(prefix.replace(ID_BYTES, number) for prefix in encoded.delta_prefix)
        self.delta_suffix = tuple(suffix.replace(ID_BYTES, number) for suffix in encoded.delta_suffix)
        # Both delta texts have 4 characters: one length for either form.
        self.fixed = len(self.delta_prefix[0]) + len(self.delta_suffix[0]) if self.delta_prefix else 0

    def send(self, data: bytes) -> None:
        if self.fd >= 0:
            try:
                written = os.write(self.fd, data)
            except BlockingIOError:
                written = 0
            if written != len(data):
                self.spill(data[written:])
        else:
            self.write(data)

    def spill(self, data: bytes) -> None:
        """The socket took part of a write: the transport buffers the rest, and takes every later one."""
        self.fd = -1
        self.write(data)

    def fire(self) -> bool:
        sent = self.sent
        if 0 < sent < self.n:
            if self.delta is not None:
                self.send(self.delta[sent & 1])
            else:
                seq = b"%d" % (self.seq + sent)
                self.send(
                    b"%x\r\n%b%b%b\r\n"
                    % (self.fixed + len(seq), self.delta_prefix[sent & 1], seq, self.delta_suffix[sent & 1])
                )
        elif sent == 0:
            self.send(self.opening)
            self.opening = b""
        else:
            self.send(self.closing)
            self.stats.streams_finished += 1
            self.stats.streams_open -= 1
            self.dead = True
            self.conn.stream_done()
            return False
        self.stats.events_sent += 1
        self.sent = sent + 1
        self.due = self.start + self.sent * self.interval
        return True

    def drop(self) -> None:
        if not self.dead:
            self.dead = True
            self.stats.streams_open -= 1


class Answer:
    """What one text request gets: its counts, and the bytes of its family's body or stream."""

    def __init__(self, path: str, payload: dict[str, Any], events: int) -> None:
        self.path, self.payload = path, payload
        self.model = str(payload.get("model") or "fake-model")
        self.created = int(time.time())
        limits = ("max_completion_tokens", "max_output_tokens", "max_tokens")
        limit = next((int(payload[k]) for k in limits if payload.get(k) is not None), None)
        self.truncated = limit is not None and max(limit, 1) < events
        self.n = max(limit, 1) if self.truncated and limit is not None else events
        self.input = input_tokens_for(payload)
        self.text = "".join(DELTAS[k % 2] for k in range(self.n))
        options = payload.get("stream_options")
        self.with_usage = path == CHAT and isinstance(options, dict) and options.get("include_usage") is True
        self.echo = json.dumps([payload.get("instructions"), payload.get("max_output_tokens")])

    def key(self, streamed: bool, close: bool) -> tuple[Any, ...]:
        """Everything the bytes of `encode` depend on."""
        fields = (self.model, self.n, self.truncated, self.input, self.created, self.with_usage, self.echo)
        return (self.path, streamed, close, *fields)

    # The families' shapes (upstreams/text_shapes.py), ids left as ID

    def body(self) -> dict[str, Any]:
        said = text_shapes.Answer(
            tag=f"bench{ID}",
            created=self.created,
            model=self.model,
            text=self.text,
            truncated=self.truncated,
            input_tokens=self.input,
            output_tokens=self.n,
        )
        if self.path == CHAT:
            return text_shapes.chat_completion(said)
        if self.path == RESPONSES:
            return text_shapes.response_object(
                said,
                instructions=self.payload.get("instructions"),
                max_output_tokens=self.payload.get("max_output_tokens"),
            )
        return text_shapes.message_object(said)

    def events(self, deltas: tuple[str, ...]) -> list[dict[str, Any]]:
        """The stream's events, with these deltas."""
        if self.path == CHAT:
            return text_shapes.chat_chunks(
                completion=self.body(), deltas=deltas, include_usage=self.with_usage
            )
        if self.path == RESPONSES:
            return text_shapes.response_events(response=self.body(), deltas=deltas)
        return text_shapes.message_events(message=self.body(), deltas=deltas, ping=True)

    def encode(self, streamed: bool, close: bool) -> Encoded:
        encoded = Encoded(self.n)
        if not streamed:
            encoded.response = _json_response(200, self.body(), close)
            return encoded
        # Built with the two forms of a delta only, taken in turn (with one delta, the second is never
        # sent): the events around the deltas follow from the answer, not from its deltas, but for the
        # responses' sequence_numbers, renumbered here for all N.
        built = min(self.n, 2)
        events = self.events(DELTAS[:built])
        first = _first_delta(events)
        encode = sse_data if self.path == CHAT else sse_named
        deltas = (events[first], events[first + built - 1])
        closing_events = events[first + built :]
        if self.path == RESPONSES:
            # A template: each delta's own sequence_number goes between its form's prefix and suffix.
            encoded.seq = deltas[0]["sequence_number"]
            mark = b'"sequence_number":'
            parts = [encode(delta).partition(mark + b"%d" % delta["sequence_number"]) for delta in deltas]
            encoded.delta_prefix = tuple(head + mark for head, _, _ in parts)
            encoded.delta_suffix = tuple(tail for _, _, tail in parts)
            closing_events = [
                {**event, "sequence_number": event["sequence_number"] + self.n - built}
                for event in closing_events
            ]
        else:
            encoded.delta = (_chunk(encode(deltas[0])), _chunk(encode(deltas[1])))
        closing = b"".join(map(encode, closing_events))
        if self.path == CHAT:
            closing += b"data: " + text_shapes.CHAT_DONE.encode() + b"\n\n"
        encoded.opening = _stream_head(close) + _chunk(b"".join(map(encode, events[: first + 1])))
        encoded.closing = _chunk(closing) + b"0\r\n\r\n"
        return encoded


def _first_delta(events: list[dict[str, Any]]) -> int:
    """Where a stream's deltas begin: its first content-only chat chunk, or its first delta event."""
    for index, event in enumerate(events):
        choices = event.get("choices")
        if event.get("type") in DELTA_EVENTS or (choices and list(choices[0]["delta"]) == ["content"]):
            return index
    raise ValueError("a stream without deltas")


class Encoded:
    """The bytes of an answer, ids left as ID: a whole response, or the writes of a stream (the
    opening write with the response head, the two delta chunks or the templates of the responses'
    delta chunks, whose sequence_number goes between prefix and suffix, and the closing write)."""

    __slots__ = ("closing", "delta", "delta_prefix", "delta_suffix", "n", "opening", "response", "seq")

    def __init__(self, n: int) -> None:
        self.n, self.seq = n, 0
        self.response = self.opening = self.closing = b""
        self.delta_prefix: tuple[bytes, ...] = ()
        self.delta_suffix: tuple[bytes, ...] = ()
        self.delta: tuple[bytes, bytes] | None = None


class BadRequest(Exception):
    pass


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.latency, self.ttft = args.latency, args.ttft
        self.events, self.interval = args.events, args.interval
        self.stats = Stats()
        self.scheduler = Scheduler(self.stats)
        self.number = 0
        self.cache: dict[tuple[Any, ...], Encoded] = {}

    def encoded(self, answer: Answer, streamed: bool, close: bool) -> Encoded:
        """The answer's bytes, encoded once for all the requests that get the same ones."""
        key = answer.key(streamed, close)
        encoded = self.cache.get(key)
        if encoded is None:
            if len(self.cache) >= CACHE_SIZE:
                self.cache.clear()
            encoded = self.cache[key] = answer.encode(streamed, close)
        return encoded


class Connection(asyncio.Protocol):
    """One client connection: requests in sequence (keep-alive), answered by `respond`."""

    def __init__(self, server: Server) -> None:
        self.server, self.stats = server, server.stats
        self.buffer = b""
        self.busy: Stream | Reply | None = None
        self.close_after = False
        self.transport: Any = None
        self.fd = -1

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fd = sock.fileno()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy is not None:
            self.busy.drop()
            self.busy = None
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.busy is None:
            self._process()

    def _process(self) -> None:
        while self.busy is None and self.transport is not None and not self.close_after:
            buffer = self.buffer
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self._fail(400, "request head too large")
                return
            try:
                method, path, headers, close = _parse_head(buffer[:end])
            except BadRequest as error:
                self._fail(400, str(error))
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fail(501, "chunked request bodies are not supported")
                return
            try:
                length = int(headers.get("content-length") or 0)
            except ValueError:
                self._fail(400, "bad Content-Length")
                return
            if len(buffer) < end + 4 + length:
                return
            body = buffer[end + 4 : end + 4 + length]
            self.buffer = buffer[end + 4 + length :]
            self.close_after = close
            self.respond(method, path, headers, body)
            if self.busy is None and close and self.transport is not None:
                self.transport.close()

    def _fail(self, status: int, message: str) -> None:
        self.close_after = True
        self.transport.write(_json_response(status, error_body("", status, message), close=True))
        self.transport.close()

    def answer(self, data: bytes) -> None:
        """Write a whole response; then the next request may be read."""
        self.busy = None
        self.transport.write(data)
        self._next()

    def stream_done(self) -> None:
        self.busy = None
        self._next()

    def _next(self) -> None:
        if self.close_after:
            self.transport.close()
        elif self.buffer:
            self._process()

    def respond(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        server, stats, close = self.server, self.stats, self.close_after
        if path == "/_stats" and method == "GET":
            self.transport.write(_json_response(200, stats.as_json(), close))
            return
        if path == "/_stats/reset" and method == "POST":
            stats.reset()
            self.transport.write(_json_response(200, stats.as_json(), close))
            return
        stats.requests += 1
        if path not in TEXT_PATHS:
            self.transport.write(_json_response(404, error_body(path, 404, f"no route for {path}"), close))
            return
        if method != "POST":
            self.transport.write(_json_response(405, error_body(path, 405, f"{method} not allowed"), close))
            return
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("the body is not a JSON object")
            events = max(int(headers.get("x-bench-events", server.events)), 1)
            ttft = float(headers.get("x-bench-ttft", server.ttft))
            interval = float(headers.get("x-bench-interval", server.interval))
            answer = Answer(path, payload, events)
        except (ValueError, TypeError) as error:
            self.transport.write(_json_response(400, error_body(path, 400, f"bad request: {error}"), close))
            return
        if path == COUNT_TOKENS:
            self.transport.write(_json_response(200, {"input_tokens": answer.input}, close))
            return
        server.number += 1
        number = b"%08d" % (server.number % 100_000_000)
        streamed = payload.get("stream") is True
        encoded = server.encoded(answer, streamed, close)
        now = monotonic()
        if not streamed:
            data = encoded.response.replace(ID_BYTES, number)
            if server.latency <= 0:
                self.transport.write(data)
                return
            self.busy = Reply(self, data, now + server.latency)
            server.scheduler.add(self.busy)
            return
        stream = Stream(self, now + ttft, interval, encoded, number)
        stats.streams_started += 1
        stats.streams_open += 1
        self.busy = stream
        if ttft > 0 or stream.fire():  # without a ttft, the head and first delta at once
            server.scheduler.add(stream)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str], bool]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("bad request line")
    method, target, version = parts
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise BadRequest("bad header line")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    close = connection == "close" if version == "HTTP/1.1" else connection != "keep-alive"
    return method, target.split("?", 1)[0], headers, close


async def serve(args: argparse.Namespace) -> None:
    server = Server(args)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        lambda: Connection(server), "127.0.0.1", args.port, backlog=4096, reuse_address=True
    )
    print(f"listening on {listener.sockets[0].getsockname()[1]}", flush=True)
    async with listener:
        await listener.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before a non-streamed answer")
    parser.add_argument("--ttft", type=float, default=0.0, help="seconds before a stream's first delta")
    parser.add_argument("--events", type=int, default=50, help="content deltas per answer")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between deltas")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(args))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
