"""gunicorn's gevent worker, accepting new connections in bursts instead of one per pass of its loop.

gunicorn's `GeventWorker` serves its listening socket with gevent's `StreamServer`, and when it runs
more than one worker it sets the server's `max_accept` (how many connections one wake of the
listening socket accepts) to 1, to spread connections over the workers. A worker then accepts one
connection per pass of its event loop. Under load a pass is long (hundreds of calls in flight and the
stream loop's events between them), and new connections wait in the kernel's accept queue for seconds
while the calls on kept-alive connections are served first: a caller that opens a connection waits
longest for its first byte (docs/benchmarks.md, "Starting calls under load").

This worker's servers keep gevent's own default, `ACCEPTS_PER_WAKE`. The workers still share the
listening socket: whichever wakes first takes what is queued, up to that many, so a worker that is
behind takes fewer.

Past gunicorn's public API (docs/architecture.md, "The complexity budget"): gunicorn builds its
servers from `gunicorn.workers.ggevent.StreamServer` and then assigns `max_accept`; the worker has
them built from a subclass on which that assignment has no effect. tests/core/test_gevent_worker.py
checks both against the installed gunicorn, and that a worker serving requests accepts in bursts.
"""

from __future__ import annotations

from typing import Any

from gevent.server import StreamServer
from gunicorn.workers import ggevent

# gevent's default (gevent.baseserver.BaseServer.max_accept).
ACCEPTS_PER_WAKE = 100


class BurstAcceptingServer(StreamServer):
    """A StreamServer whose `max_accept` stays ACCEPTS_PER_WAKE whatever is assigned to it."""

    @property
    def max_accept(self) -> int:
        return ACCEPTS_PER_WAKE

    @max_accept.setter
    def max_accept(self, value: Any) -> None:
        """gunicorn assigns 1 when it runs more than one worker: kept at ACCEPTS_PER_WAKE."""


class GeventWorker(ggevent.GeventWorker):
    """gunicorn's gevent worker whose servers accept in bursts (`gevent` in gunicorn.conf.py)."""

    def run(self) -> None:
        # gunicorn's run() builds its servers from this module global; only this process's copy of it
        # changes (the worker is a forked process of its own).
        ggevent.StreamServer = BurstAcceptingServer  # type: ignore[attr-defined]
        super().run()
