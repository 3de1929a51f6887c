"""api/stream_loop.py: one loop per gevent worker relays many streams, straight to their callers'
connections. Run in a fresh interpreter that gevent has patched (tests/gevent_probe.py), over socket
pairs: an "upstream" pair the probe writes to and the loop reads, a "caller" pair the loop writes to
and the probe reads. The streams through the whole gateway are in tests/chat/test_sdk_e2e.py.
"""

from __future__ import annotations

import pytest
from gunicorn import util
from gunicorn.config import Config
from gunicorn.http.wsgi import Response, default_environ

from api.stream_loop import caller_socket, chunk_framed
from tests.gevent_probe import gevent_probe_run

PROBE = r"""
import json
import os
import resource
import socket
import sys
import time

import gevent

from api.stream_loop import CALLER_GONE, LEFT, TIMED_OUT, CallerSocket, stream_loop_relay

scenario = sys.argv[1]


def pair(size=None):
    a, b = socket.socketpair()
    if size:
        for sock in (a, b):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    return a, b


def dechunked(wire):
    out, pos = [], 0
    while pos < len(wire):
        line_end = wire.index(b"\r\n", pos)
        size = int(wire[pos:line_end], 16)
        out.append(wire[line_end + 2 : line_end + 2 + size])
        assert wire[line_end + 2 + size : line_end + 4 + size] == b"\r\n"
        pos = line_end + 4 + size
    return b"".join(out)


def reader_step(fd, end=b"END"):
    def step():
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return None
        return data, data.endswith(end) or not data
    return step


def read_all(sock, end=b"END\r\n", delay=0.0):
    # what the caller receives, up to `end`
    gevent.sleep(delay)
    got = b""
    while not got.endswith(end):
        data = sock.recv(65536)
        if not data:
            break
        got += data
    return got


result = {}
if scenario == "many":
    streams = 60
    outcomes, bodies, sent = [None] * streams, [None] * streams, [None] * streams
    pairs = [(pair(), pair()) for _ in range(streams)]

    import greenlet

    traced = []

    def produce(i, up_w):
        chunks = [b"data: %d-%d\n\n" % (i, n) for n in range(20)] + [b"END"]
        sent[i] = b"".join(chunks)
        for n, chunk in enumerate(chunks):
            up_w.sendall(chunk)
            gevent.sleep(0.002 * (i % 5))
            if n == 10:
                traced.append(greenlet.gettrace() is not None)

    def relay(i, up_r, caller_w):
        outcomes[i] = stream_loop_relay(
            upstream_fd=up_r.fileno(), caller=CallerSocket(fd=caller_w.fileno(), chunked=True),
            step=reader_step(up_r.fileno()), timeout=10,
        )

    def consume(i, caller_r):
        bodies[i] = dechunked(read_all(caller_r))

    jobs = []
    for i, ((up_w, up_r), (caller_w, caller_r)) in enumerate(pairs):
        jobs += [gevent.spawn(relay, i, up_r, caller_w), gevent.spawn(consume, i, caller_r),
                 gevent.spawn(produce, i, up_w)]
    gevent.joinall(jobs, timeout=20, raise_error=True)
    gevent.sleep(1.2)  # the loop's greenlet ends at the latest at its next tick (1 s), with its tracer
    result = {"outcomes": sorted(set(outcomes)), "whole": [b == s for b, s in zip(bodies, sent)].count(True),
              "tracing while open": all(traced), "tracing after": greenlet.gettrace() is not None}

elif scenario == "full_caller":
    # The caller reads nothing for 0.5 s while 4 MB come: the loop waits for it, then writes the rest.
    (up_w, up_r), (caller_w, caller_r) = pair(), pair(16 * 1024)
    blob = os.urandom(4 * 1024 * 1024).hex().encode()[: 4 * 1024 * 1024] + b"END"
    producer = gevent.spawn(up_w.sendall, blob)
    consumer = gevent.spawn(read_all, caller_r, b"END", 0.5)
    outcome = stream_loop_relay(
        upstream_fd=up_r.fileno(), caller=CallerSocket(fd=caller_w.fileno(), chunked=False),
        step=reader_step(up_r.fileno()), timeout=10,
    )
    body = consumer.get(timeout=10)
    producer.get(timeout=10)
    result = {"outcome": outcome, "whole": body == blob}

elif scenario == "full_caller_upstream_hangs_up":
    # While the caller's connection is full the upstream closes: the loop must not spin on it.
    (up_w, up_r), (caller_w, caller_r) = pair(), pair(16 * 1024)
    closed = []

    def send_then_close():
        up_w.sendall(b"x" * (128 * 1024))
        gevent.sleep(0.2)
        up_w.close()
        closed.append(True)

    gevent.spawn(send_then_close)
    steps = []

    def step():
        steps.append(1)
        try:
            data = os.read(up_r.fileno(), 65536)
        except BlockingIOError:
            return None
        return data, not data

    relay = gevent.spawn(
        stream_loop_relay, upstream_fd=up_r.fileno(),
        caller=CallerSocket(fd=caller_w.fileno(), chunked=False), step=step, timeout=10,
    )
    gevent.sleep(0.3)
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    gevent.sleep(1.0)
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    spent = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    steps_while_full = len(steps)
    closed_while_full = bool(closed)
    got = 0
    caller_r.setblocking(False)
    while True:
        gevent.sleep(0.05)
        try:
            data = caller_r.recv(1 << 20)
        except BlockingIOError:
            if relay.ready():
                break
            continue
        got += len(data)
    result = {"outcome": relay.get(timeout=5), "cpu_while_full": spent, "got": got,
              "steps_while_full": steps_while_full, "closed_while_full": closed_while_full}

elif scenario == "caller_gone":
    (up_w, up_r), (caller_w, caller_r) = pair(), pair()
    up_w.sendall(b"data: one\n\n")

    def leave_then_more():
        caller_r.recv(100)
        caller_r.close()
        for n in range(50):
            gevent.sleep(0.01)
            up_w.sendall(b"data: more\n\n")

    gevent.spawn(leave_then_more)
    outcome = stream_loop_relay(
        upstream_fd=up_r.fileno(), caller=CallerSocket(fd=caller_w.fileno(), chunked=True),
        step=reader_step(up_r.fileno()), timeout=10,
    )
    try:
        caller_w.send(b"after")
        shut = False
    except OSError:
        shut = True
    result = {"outcome": outcome, "shut": shut}

elif scenario == "caller_never_reads":
    # The caller's connection fills and it takes nothing for the stream's timeout: it is gone.
    (up_w, up_r), (caller_w, caller_r) = pair(), pair(16 * 1024)
    producer = gevent.spawn(up_w.sendall, b"x" * (512 * 1024))
    started = time.monotonic()
    outcome = stream_loop_relay(
        upstream_fd=up_r.fileno(), caller=CallerSocket(fd=caller_w.fileno(), chunked=False),
        step=reader_step(up_r.fileno()), timeout=0.3,
    )
    producer.kill()
    result = {"outcome": outcome, "seconds": time.monotonic() - started}

elif scenario == "silent_upstream":
    (up_w, up_r), (caller_w, caller_r) = pair(), pair()
    up_w.sendall(b"data: one\n\n")
    started = time.monotonic()
    outcome = stream_loop_relay(
        upstream_fd=up_r.fileno(), caller=CallerSocket(fd=caller_w.fileno(), chunked=True),
        step=reader_step(up_r.fileno()), timeout=0.3,
    )
    result = {"outcome": outcome, "seconds": time.monotonic() - started,
              "got": caller_r.recv(100).decode()}

elif scenario == "step_raises":
    # One stream's step fails: that stream's greenlet gets the exception, the other goes on.
    (a_w, a_r), (ca_w, ca_r) = pair(), pair()
    (b_w, b_r), (cb_w, cb_r) = pair(), pair()

    def failing():
        try:
            data = os.read(a_r.fileno(), 100)
        except BlockingIOError:
            return None
        if b"boom" in data:
            raise ValueError("tracker says no")
        return data, False

    def run_failing():
        try:
            stream_loop_relay(upstream_fd=a_r.fileno(), caller=CallerSocket(fd=ca_w.fileno(), chunked=False),
                              step=failing, timeout=10)
        except ValueError as exc:
            return f"raised: {exc}"
        return "no exception"

    first = gevent.spawn(run_failing)
    second = gevent.spawn(
        stream_loop_relay, upstream_fd=b_r.fileno(), caller=CallerSocket(fd=cb_w.fileno(), chunked=False),
        step=reader_step(b_r.fileno()), timeout=10,
    )
    gevent.sleep(0.05)
    a_w.sendall(b"data: fine\n\n")
    gevent.sleep(0.05)
    a_w.sendall(b"boom")
    gevent.sleep(0.05)
    b_w.sendall(b"data: still\n\n")
    gevent.sleep(0.05)
    b_w.sendall(b"END")
    result = {"first": first.get(timeout=5), "second": second.get(timeout=5),
              "a": ca_r.recv(100).decode(), "b": read_all(cb_r, b"END").decode()}

elif scenario == "busy_hub":
    # Other greenlets keep the hub busy (50 of them, 2 ms of CPU each between switches: a pass of the
    # hub takes ~100 ms) while an upstream process sends an event every 10 ms and a caller process
    # times their arrival: events must not wait for the hub's pass.
    from gevent.monkey import get_original

    real_sleep = get_original("time", "sleep")
    (up_w, up_r), (caller_w, caller_r) = pair(), pair()
    results_r, results_w = os.pipe()
    if os.fork() == 0:  # the upstream
        for n in range(100):
            up_w.send(b"data: %d\n\n" % n)
            real_sleep(0.01)
        up_w.send(b"END")
        os._exit(0)
    if os.fork() == 0:  # the caller
        arrivals, got = [], b""
        while not got.endswith(b"END"):
            data = caller_r.recv(65536)
            if not data:
                break
            got += data
            arrivals.append(time.monotonic())
        gaps = sorted(b - a for a, b in zip(arrivals, arrivals[1:]))
        os.write(results_w, json.dumps({"max_gap": gaps[-1], "arrivals": len(arrivals)}).encode())
        os._exit(0)
    stop = []

    def busy():
        while not stop:
            until = time.monotonic() + 0.002
            while time.monotonic() < until:
                pass
            gevent.sleep(0)

    workers = [gevent.spawn(busy) for _ in range(50)]
    outcome = stream_loop_relay(
        upstream_fd=up_r.fileno(), caller=CallerSocket(fd=caller_w.fileno(), chunked=False),
        step=reader_step(up_r.fileno()), timeout=10,
    )
    stop.append(True)
    gevent.joinall(workers)
    result = {"outcome": outcome, **json.loads(os.read(results_r, 1000))}

elif scenario == "greenlet_killed":
    # The stream's greenlet is killed while it waits (a worker stopping): the loop lets go of it.
    (up_w, up_r), (caller_w, caller_r) = pair(), pair()
    steps = []

    def step():
        steps.append(1)
        return reader_step(up_r.fileno())()

    relay = gevent.spawn(
        stream_loop_relay, upstream_fd=up_r.fileno(),
        caller=CallerSocket(fd=caller_w.fileno(), chunked=False), step=step, timeout=10,
    )
    gevent.sleep(0.05)
    up_w.sendall(b"data: one\n\n")
    gevent.sleep(0.05)
    relay.kill()
    steps_when_killed = len(steps)
    up_w.sendall(b"data: two\n\n")
    gevent.sleep(0.1)
    caller_r.setblocking(False)
    result = {"killed": relay.dead, "steps_after_kill": len(steps) - steps_when_killed,
              "caller_got": caller_r.recv(100).decode()}

elif scenario == "caller_socket":
    from django.test import override_settings

    from api.stream_loop import caller_socket, chunk_framed

    sock = socket.socket()

    def framing(environ):
        caller = caller_socket(environ)
        return None if caller is None else [caller.fd == sock.fileno(), caller.chunked]

    result = {
        "HTTP/1.1": framing({"gunicorn.socket": sock, "SERVER_PROTOCOL": "HTTP/1.1"}),
        "HTTP/1.0": framing({"gunicorn.socket": sock, "SERVER_PROTOCOL": "HTTP/1.0"}),
        "no socket": framing({"SERVER_PROTOCOL": "HTTP/1.1"}),
    }
    with override_settings(GATEWAY_STREAM_LOOP=False):
        result["loop off"] = framing({"gunicorn.socket": sock, "SERVER_PROTOCOL": "HTTP/1.1"})

print(json.dumps(result))
"""


def probe(scenario: str) -> dict:
    return gevent_probe_run(PROBE, scenario, timeout=60)


def test_it_relays_many_streams_at_once_each_whole_and_framed_as_gunicorn_frames_it():
    report = probe("many")

    assert (report["outcomes"], report["whole"]) == (["left"], 60)
    # The switch tracer serves the loop while streams are in it, and is gone once none is left.
    assert (report["tracing while open"], report["tracing after"]) == (True, False)


def test_events_are_relayed_between_greenlets_not_after_the_hubs_whole_pass():
    report = probe("busy_hub")

    assert report["outcome"] == "left"
    assert report["arrivals"] >= 50  # events 10 ms apart arrive apart, not in bunches of a pass
    assert report["max_gap"] < 0.04  # a pass of the hub takes ~100 ms


def test_a_stream_whose_greenlet_is_killed_leaves_the_loop_unserved():
    report = probe("greenlet_killed")

    assert report == {"killed": True, "steps_after_kill": 0, "caller_got": "data: one\n\n"}


def test_a_caller_that_reads_slowly_gets_every_byte_and_the_upstream_waits_for_it():
    report = probe("full_caller")

    assert report == {"outcome": "left", "whole": True}


def test_an_upstream_hanging_up_while_the_caller_is_full_does_not_spin_the_loop():
    report = probe("full_caller_upstream_hangs_up")

    assert report["closed_while_full"]
    assert report["outcome"] == "left"  # the end of the upstream's body, once the caller took the rest
    assert report["got"] == 128 * 1024
    assert report["cpu_while_full"] < 0.2  # seconds of CPU over a second of waiting
    assert report["steps_while_full"] <= 8  # the upstream is not read while the caller is full


def test_a_caller_who_leaves_takes_the_stream_out_of_the_loop_and_its_connection_is_shut():
    report = probe("caller_gone")

    assert report == {"outcome": "caller_gone", "shut": True}


def test_a_caller_whose_connection_stays_full_past_the_timeout_is_gone():
    report = probe("caller_never_reads")

    assert report["outcome"] == "caller_gone"
    assert 0.3 <= report["seconds"] < 3  # timeouts are checked once a second


def test_an_upstream_silent_past_its_timeout_takes_the_stream_out_of_the_loop():
    report = probe("silent_upstream")

    assert report["outcome"] == "timed_out"
    assert 0.3 <= report["seconds"] < 3  # timeouts are checked once a second
    assert report["got"] == "B\r\ndata: one\n\n\r\n"  # gunicorn writes the size in capitals too


def test_an_exception_in_one_streams_step_reaches_its_greenlet_and_spares_the_others():
    report = probe("step_raises")

    assert report["first"] == "raised: tracker says no"
    assert report["a"] == "data: fine\n\n"
    assert report["second"] == "left"
    assert report["b"] == "data: still\n\nEND"


# What the loop relies on in gunicorn (api/stream_loop.py): a release that changes it fails here.


class _Request:
    def __init__(self, version: tuple[int, int], method: str = "POST") -> None:
        self.version = version
        self.method = method
        self.headers: list = []
        self.body = self.query = self.uri = ""


class _Sent:
    def __init__(self) -> None:
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def fileno(self) -> int:
        return 7


def test_gunicorn_gives_the_caller_socket_and_frames_a_chunk_as_the_loop_does():
    sock = _Sent()
    assert default_environ(_Request((1, 1)), sock, Config())["gunicorn.socket"] is sock
    for data in (b"data: x\n\n", b"y" * 300, b"z" * 70_000):
        sock.sent = b""
        util.write(sock, data, chunked=True)
        assert sock.sent == chunk_framed(data)


@pytest.mark.parametrize(("version", "chunked"), [((1, 1), True), ((1, 0), False)])
def test_gunicorn_chunks_a_stream_exactly_when_the_loop_frames_it(version, chunked):
    """gunicorn's own decision for a 200 without Content-Length to a POST, against caller_socket's."""
    response = Response(_Request(version), sock=None, cfg=None)
    response.status_code = 200
    assert response.is_chunked() is chunked
    report = probe("caller_socket")
    assert report[f"HTTP/{version[0]}.{version[1]}"] == [True, chunked]


def test_under_gevent_there_is_no_caller_socket_without_gunicorns_or_with_the_loop_off():
    report = probe("caller_socket")

    assert report["no socket"] is None
    assert report["loop off"] is None


def test_there_is_no_caller_socket_outside_gevent():
    # This test process is not patched by gevent: streams go one thread each, as under gthread.
    assert caller_socket({"gunicorn.socket": _Sent(), "SERVER_PROTOCOL": "HTTP/1.1"}) is None
