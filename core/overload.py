"""How late this worker process serves what is due: the signal for shedding new calls when it cannot
keep up (api/shedding.py).

A sampler sleeps `SAMPLE_SECONDS` again and again, in a thread of its own (a greenlet under gevent,
whose monkey-patching makes `threading` and `time.sleep` cooperative). While the process keeps up it
wakes on time. When the calls in flight hold the process (the interpreter lock busy under gthread;
under gevent, more ready greenlets and events than the hub gets through), it wakes late, and
`worker_lag()`, how long past its wake-up time it is now, is what a call arriving now waits before
the process gets to it. It is read at the moment a call arrives, so a sampler that has not run for
seconds shows seconds before it runs again; and how late it woke stays the answer for
`REMEMBERED_SECONDS` after, so a process that was behind a moment ago is not taken for one that has
caught up because the sampler happened to run just now.
"""

from __future__ import annotations

import os
import threading
import time

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
