"""The stream loop: one loop per gevent worker that relays the events of all its open streams, writing
them straight to the callers' connections.

Relayed one greenlet per stream, every event costs a trip through gevent's hub (a would-block read,
a timer for the read timeout, two greenlet switches) and through the WSGI layers on the way out
(Django's streaming response, gunicorn's chunked writer, gevent's `sendall`), and waits for the
stream's greenlet's turn in the hub's pass over every greenlet it has ready: under a thousand streams
a pass takes tens of milliseconds. Here one epoll set holds every stream's upstream connection; it is
served between greenlets, at least once a millisecond (`_Loop`), and for each connection that has
something the stream's `step` (the relay's parsing and usage tracking, chat/streaming.py) reads it
and what it returns goes to the caller's socket in one `os.write` (docs/benchmarks.md, "Where the
time goes in a streamed call").

A stream comes here only after its answer has begun: the status and headers and the first event went
out through gunicorn as usual. Its greenlet waits (parked, no CPU) until the stream leaves the loop:
`step` says so (its final event, or the upstream's body ended, or an error to answer), the caller's
connection fails or takes nothing for the stream's timeout, or the upstream sends nothing for it.
Then the greenlet carries on through gunicorn: the capture, the last bytes, the end of
the body. So only the middle of a stream's body bypasses gunicorn's writer, and the bytes it writes
are framed as gunicorn frames them.

What this relies on outside public APIs (docs/architecture.md, "The complexity budget"), checked by
tests/api/test_stream_loop.py, which fails if a release changes it:
- gunicorn puts the caller's socket in the WSGI environ as `gunicorn.socket`;
- gunicorn sends a response without Content-Length to an HTTP/1.1 request chunked ("%X\\r\\n" data
  "\\r\\n" per write, gunicorn.http.wsgi.Response.is_chunked), and to HTTP/1.0 as it is, closing the
  connection at its end;
- gevent's sockets never block at the OS level, so the sockets' own descriptors read and write
  without waiting.

Used only under gunicorn's gevent worker (the PostgreSQL default) and when GATEWAY_STREAM_LOOP is on;
anywhere else (gthread, runserver, the test client) `caller_socket` is None and streams are relayed
one greenlet or thread each.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.metrics import STREAM_LOOP_STREAMS

__all__ = [
    "CALLER_GONE",
    "LEFT",
    "TIMED_OUT",
    "CallerSocket",
    "caller_socket",
    "chunk_framed",
    "stream_loop_relay",
]


LEFT = "left"  # `step` said the stream leaves the loop, and what it returned was written
CALLER_GONE = "caller_gone"  # the caller's connection failed, or took nothing for the timeout
TIMED_OUT = "timed_out"  # the upstream sent nothing for the timeout

_MAX_EVENTS = 256  # streams served per wake before the loop lets the worker's other greenlets run
_TICK_SECONDS = 1.0  # how often timeouts are checked
_TRACE_SECONDS = 0.001  # served at a greenlet switch at most this often


@dataclass(frozen=True, slots=True)
class CallerSocket:
    """The caller's connection, to write the middle of a streamed answer's body to: its descriptor,
    and whether gunicorn frames the body in chunks (HTTP/1.1) or sends it as it is (HTTP/1.0)."""

    fd: int
    chunked: bool


def caller_socket(environ: Mapping[str, Any]) -> CallerSocket | None:
    """The caller's connection when this request is served by gunicorn's gevent worker and the stream
    loop is on (GATEWAY_STREAM_LOOP); None otherwise."""
    if not settings.GATEWAY_STREAM_LOOP:
        return None
    sock = environ.get("gunicorn.socket")
    if sock is None or not _gevent_patched():
        return None
    # gunicorn chunks an answer without Content-Length to HTTP/1.1 (its Response.is_chunked: not for
    # HTTP/1.0, HEAD, 204 or 304; a stream is a 200 to a POST).
    chunked = environ.get("SERVER_PROTOCOL") not in ("HTTP/1.0", "HTTP/0.9")
    return CallerSocket(fd=sock.fileno(), chunked=chunked)


def chunk_framed(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body, framed as gunicorn frames each write."""
    return b"%X\r\n%b\r\n" % (len(data), data)


@functools.cache  # decided once: gunicorn's gevent worker patches before it loads the application
def _gevent_patched() -> bool:
    try:
        from gevent import monkey
    except ImportError:  # pragma: no cover - gevent is a dependency
        return False
    return bool(monkey.is_module_patched("socket"))


def stream_loop_relay(
    *, upstream_fd: int, caller: CallerSocket, step: Callable[[], tuple[bytes, bool] | None], timeout: float
) -> str:
    """Relay a stream in this worker's loop until it leaves it; the calling greenlet waits meanwhile.

    `step` is called when the upstream's connection `upstream_fd` has something (and once when the
    stream arrives): it reads it and returns the bytes for the caller (b"" for none) and whether the
    stream leaves the loop once they are written, or None when the read found nothing. It must never
    wait on anything of gevent's (a lock, a socket, a log handler): it runs between greenlets,
    possibly in the switch tracer, while the stream's greenlet waits. An exception it raises leaves
    the loop and is raised here. Returns LEFT; CALLER_GONE when the caller's connection failed, or
    was full and took nothing for `timeout` seconds (it is then shut down); or TIMED_OUT when the
    upstream sent nothing for `timeout` seconds.
    """
    stream = _Stream(upstream_fd=upstream_fd, caller=caller, step=step, timeout=timeout)
    loop = _loop()
    loop.add(stream)
    try:
        stream.left.wait()
    except BaseException:  # the greenlet is killed (a worker stopping): its sockets may close now
        loop.discard(stream)
        raise
    STREAM_LOOP_STREAMS.labels(outcome=stream.outcome).inc()
    if stream.outcome == CALLER_GONE:
        _shut(caller.fd)  # gunicorn's last writes then fail at once instead of waiting on a full one
    if stream.error is not None:
        error, stream.error = stream.error, None
        raise error
    assert stream.outcome is not None
    return stream.outcome


class _Stream:
    __slots__ = (
        "caller_fd",
        "chunked",
        "error",
        "leaving",
        "left",
        "outbox",
        "outcome",
        "progress",
        "step",
        "timeout",
        "upstream_fd",
    )

    def __init__(
        self,
        *,
        upstream_fd: int,
        caller: CallerSocket,
        step: Callable[[], tuple[bytes, bool] | None],
        timeout: float,
    ) -> None:
        from gevent.event import Event

        self.upstream_fd = upstream_fd
        self.caller_fd = caller.fd
        self.chunked = caller.chunked
        self.step = step
        self.timeout = timeout
        self.progress = time.monotonic()  # the last byte read from the upstream or taken by the caller
        self.outbox: bytes | memoryview = b""  # written in part: the rest waits for the caller
        self.leaving = False  # leaves once the outbox is written
        self.outcome: str | None = None
        self.error: BaseException | None = None
        self.left = Event()  # set once the stream has left the loop


class _Loop:
    """The worker's loop: one epoll set of the upstream connections (and of the callers' connections
    that are full), served in the worker's own thread, between greenlets.

    It is served at every greenlet switch once a millisecond has passed since it last was (a greenlet
    switch tracer, `greenlet.settrace`), and by a greenlet of its own that waits on the set when the
    worker has nothing else to do. A greenlet alone would wait for its turn behind every greenlet the
    hub has ready (calls starting, answers from PostgreSQL): under load a pass of the hub takes tens
    of milliseconds, which every event would wait. An OS thread would not wait for the hub, but for
    the interpreter: every read and write gives it up to the busy hub thread, and taking it back takes
    up to the switch interval (5 ms). Between switches, streams wait at most one greenlet's run.

    Serving never switches greenlets (nothing in it waits on gevent), so it is safe in the tracer.
    """

    def __init__(self) -> None:
        from gevent import get_hub
        from gevent.monkey import get_original

        self.pid = os.getpid()
        self.epoll = get_original("select", "epoll")()
        self.readers: dict[int, _Stream] = {}  # by upstream descriptor
        self.writers: dict[int, _Stream] = {}  # by caller descriptor, while its connection is full
        self.watcher = get_hub().loop.io(self.epoll.fileno(), 1)
        self.greenlet: Any = None
        self.tracing = False
        self.previous_tracer: Any = None
        self.serving = False
        self.now = self.served_at = time.monotonic()
        self.sweep_at = self.now + _TICK_SECONDS

    def add(self, stream: _Stream) -> None:
        """Serve `stream` once now (what the upstream's connection already holds), then in the loop."""
        import greenlet
        from gevent import spawn

        self.now = time.monotonic()
        self.readers[stream.upstream_fd] = stream
        self.epoll.register(stream.upstream_fd, select.EPOLLIN)
        self._serve(stream)
        if not self.readers:
            return
        if self.greenlet is None:
            self.greenlet = spawn(self._run)
        if not self.tracing:
            self.previous_tracer = greenlet.settrace(self._traced)
            self.tracing = True

    def discard(self, stream: _Stream) -> None:
        """Take `stream` out of the loop, unserved (its greenlet no longer waits for it)."""
        if stream.outcome is None:
            self._leave(stream, CALLER_GONE)

    def _traced(self, event: str, args: Any) -> None:
        """The greenlet switch tracer: serve the set if a millisecond has passed."""
        if self.previous_tracer is not None:
            self.previous_tracer(event, args)
        now = time.monotonic()
        if now - self.served_at >= _TRACE_SECONDS and not self.serving:
            self._serve_ready(now)

    def _run(self) -> None:
        """The loop's greenlet: serve the set whenever it has something, until no stream is left."""
        import greenlet
        from gevent.socket import wait

        try:
            while self.readers:
                with contextlib.suppress(TimeoutError):  # a tick: time to check the timeouts
                    wait(self.watcher, timeout=_TICK_SECONDS)
                self._serve_ready(time.monotonic())
        finally:
            self.greenlet = None
            if self.tracing:
                greenlet.settrace(self.previous_tracer)
                self.tracing = False

    def _serve_ready(self, now: float) -> None:
        """Serve every stream whose connection has something, and check the timeouts once a tick."""
        self.serving = True
        self.now = self.served_at = now
        readers, writers = self.readers, self.writers
        try:
            for fd, _mask in self.epoll.poll(0, _MAX_EVENTS):
                stream = readers.get(fd)
                if stream is not None:
                    if not stream.outbox:
                        self._serve(stream)
                elif (stream := writers.get(fd)) is not None:
                    self._flush(stream)
            if now >= self.sweep_at:
                self._sweep()
        except BaseException as exc:  # a fault of the loop itself: its streams leave with it
            for stream in list(readers.values()):
                stream.error = exc
                self._leave(stream, LEFT)
        finally:
            self.serving = False

    def _serve(self, stream: _Stream) -> None:
        try:
            result = stream.step()
        except BaseException as exc:  # the relay's to answer, in the stream's own greenlet
            stream.error = exc
            self._leave(stream, LEFT)
            return
        if result is None:
            return
        stream.progress = self.now
        out, leave = result
        if out:
            if stream.chunked:
                out = chunk_framed(out)
            if not self._write(stream, out):
                stream.leaving = leave
                return
        if leave:
            self._leave(stream, LEFT)

    def _write(self, stream: _Stream, data: bytes | memoryview) -> bool:
        """Write to the caller; False when the stream left (the caller is gone) or must wait for it."""
        try:
            written = os.write(stream.caller_fd, data)
        except BlockingIOError:
            written = 0
        except OSError:
            self._leave(stream, CALLER_GONE)
            return False
        if written == len(data):
            stream.outbox = b""
            return True
        # The caller's connection is full: stop reading the upstream until it has taken the rest.
        stream.outbox = memoryview(data)[written:]
        if stream.caller_fd not in self.writers:
            # Out of the set, not only unwatched: a hang-up is reported whatever the mask.
            self.epoll.unregister(stream.upstream_fd)
            self.epoll.register(stream.caller_fd, select.EPOLLOUT)
            self.writers[stream.caller_fd] = stream
            stream.progress = self.now
        return False

    def _flush(self, stream: _Stream) -> None:
        before = len(stream.outbox)
        if not self._write(stream, stream.outbox):
            if stream.outcome is None and len(stream.outbox) < before:
                stream.progress = self.now
            return
        stream.progress = self.now
        del self.writers[stream.caller_fd]
        self.epoll.unregister(stream.caller_fd)
        self.epoll.register(stream.upstream_fd, select.EPOLLIN)
        if stream.leaving:
            self._leave(stream, LEFT)

    def _sweep(self) -> None:
        now = self.now
        self.sweep_at = now + _TICK_SECONDS
        for stream in list(self.readers.values()):
            if now - stream.progress > stream.timeout:
                self._leave(stream, CALLER_GONE if stream.outbox else TIMED_OUT)

    def _leave(self, stream: _Stream, outcome: str) -> None:
        if self.readers.pop(stream.upstream_fd, None) is not None:
            _unregister(self.epoll, stream.upstream_fd)
        if self.writers.pop(stream.caller_fd, None) is not None:
            _unregister(self.epoll, stream.caller_fd)
        stream.outbox = b""
        stream.outcome = outcome
        stream.left.set()  # wakes the stream's greenlet through the hub: no switch here


def _unregister(epoll: Any, fd: int) -> None:
    with contextlib.suppress(OSError):  # closed meanwhile: the kernel dropped it from the set already
        epoll.unregister(fd)


def _shut(fd: int) -> None:
    """Shut the connection down both ways (through a duplicate descriptor: gunicorn closes its own)."""
    try:
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as duplicate:
            duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


_the_loop: _Loop | None = None


def _loop() -> _Loop:
    """This process's loop (a worker forked from a process that had one makes its own)."""
    global _the_loop
    if _the_loop is None or _the_loop.pid != os.getpid():
        _the_loop = _Loop()
    return _the_loop
