"""How far behind this worker process is: the signals for shedding new calls when it cannot keep up
(api/shedding.py).

Two signals, the larger of which counts:

- how late the process serves what is due (`worker_lag`, below);
- how long it takes to start a call (`start_delay`): from the call's arrival at the application to
  its upstream request (the upstream's own time is not counted, nor a download from a server the
  caller named: `call_start_paused`), for the calls started lately and the oldest still waiting. A
  call's start takes
  many turns of the process (parsing, the hold's reserve, opening the upstream's connection), each
  waiting behind everything else that is ready, so a call can wait seconds in a process whose every
  single wait is short, which the lag alone misses (docs/benchmarks.md, "Starting calls under load").

How the lag is measured: a sampler sleeps `SAMPLE_SECONDS` again and again, in a thread of its own
(a greenlet under gevent, whose monkey-patching makes `threading` and `time.sleep` cooperative).
While the process keeps up it wakes on time. When the calls in flight hold the process (the
interpreter lock busy under gthread; under gevent, more ready greenlets and events than the hub gets
through), it wakes late, and `worker_lag()`, how long past its wake-up time it is now, is what a
call arriving now waits before the process gets to it. It is read at the moment a call arrives, so a
sampler that has not run for seconds shows seconds before it runs again; and how late it woke stays
the answer for `REMEMBERED_SECONDS` after, so a process that was behind a moment ago is not taken
for one that has caught up because the sampler happened to run just now.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SAMPLE_SECONDS = 0.05
REMEMBERED_SECONDS = 1.0


class _Sampler:
    """Started in each process on first use (a forked worker does not inherit its parent's thread)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.due = 0.0
        self.late = 0.0  # how late the sampler last woke
        self.late_at = 0.0  # when

    def started(self) -> None:
        pid = os.getpid()
        if self.pid == pid:
            return
        self.pid = pid
        self.due = time.monotonic() + SAMPLE_SECONDS
        threading.Thread(target=self._run, name="gateway-lag-sampler", daemon=True).start()

    def _run(self) -> None:
        while True:
            self.due = time.monotonic() + SAMPLE_SECONDS
            time.sleep(SAMPLE_SECONDS)
            woke = time.monotonic()
            self.late, self.late_at = woke - self.due, woke


_sampler = _Sampler()


def worker_lag() -> float:
    """Seconds this process is late with what was due now (0 while it keeps up)."""
    _sampler.started()
    now = time.monotonic()
    late = _sampler.late if now - _sampler.late_at < REMEMBERED_SECONDS else 0.0
    return max(0.0, now - _sampler.due, late)


class _Starts:
    """The longest start delay of the calls started in the current and in the previous window of
    `REMEMBERED_SECONDS` (two buckets: constant work per call)."""

    def __init__(self) -> None:
        self.window = -1  # the current window's number
        self.current = 0.0
        self.previous = 0.0

    def _roll(self, now: float) -> None:
        window = int(now / REMEMBERED_SECONDS)
        if window != self.window:
            self.previous = self.current if window == self.window + 1 else 0.0
            self.current = 0.0
            self.window = window

    def note(self, delay: float, now: float) -> None:
        self._roll(now)
        if delay > self.current:
            self.current = delay

    def longest(self, now: float) -> float:
        self._roll(now)
        return max(self.current, self.previous)


_starts = _Starts()
_call = threading.local()  # per thread; per greenlet under gevent
_keys = itertools.count()
# The calls that arrived and have not started yet: their arrival, by a key of their own. The oldest
# says how long a call that arrives now would wait at least.
_waiting: dict[int, float] = {}


def call_arrived(*, counted: bool) -> None:
    """A request arrived (the shedding middleware): when, if it is a call whose start counts."""
    call_ended()
    if counted:
        key, now = next(_keys), time.monotonic()
        _call.key, _call.arrived = key, now
        _waiting[key] = now


def call_started() -> None:
    """This call is about to send its upstream request: how long getting here took, noted (once per
    call; a retry's or failover's next attempt is not a new start)."""
    arrived = getattr(_call, "arrived", None)
    if arrived is None:
        return
    call_ended()
    now = time.monotonic()
    _starts.note(now - arrived, now)


def call_ended() -> None:
    """The request is over, or its call has started: it no longer waits to start."""
    key = getattr(_call, "key", None)
    if key is not None:
        _waiting.pop(key, None)
    _call.key = _call.arrived = None


@contextmanager
def call_start_paused() -> Iterator[None]:
    """Around a wait on a server the caller named (an image by link): how fast it answers says
    nothing of this process, so the call is not waiting to start meanwhile, and its start is
    measured without the pause."""
    key, arrived = getattr(_call, "key", None), getattr(_call, "arrived", None)
    if key is None or arrived is None:
        yield
        return
    _waiting.pop(key, None)
    paused = time.monotonic()
    try:
        yield
    finally:
        if _call.key == key:  # still this call's, waiting to start
            _call.arrived = arrived + (time.monotonic() - paused)
            _waiting[key] = _call.arrived


def start_delay() -> float:
    """How long this process takes to start a call now: the longest start among the calls started
    lately, or the wait so far of the oldest call still waiting to start, whichever is longer (0 if
    there is none of either)."""
    now = time.monotonic()
    arrivals = list(_waiting.values())  # one copy: other threads add and remove meanwhile
    waited = now - min(arrivals) if arrivals else 0.0
    return max(_starts.longest(now), waited)
