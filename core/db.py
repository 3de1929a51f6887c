"""psycopg connections that wait for PostgreSQL on gevent's own io watchers in gevent workers.

psycopg waits for its socket in C, which would block a whole gevent worker, so once gevent has
patched `select` it waits through Python's `select.poll` instead: gevent's emulation of it builds a
poll object, its registrations and a result object for every wait, then waits on the hub all the
same. That came to 0.17 M instructions a call, 3 % of a call through a worker
(`bench/instructions.py --server`, against psycopg's C wait). `GreenConnection.wait` waits on one gevent
io watcher instead (-2.7 % instructions per call through a worker).

It takes over only what it can do as psycopg does: a wait without a timeout, in a process gevent
has patched. Anything else (a timeout, as a connection attempt or a cancellation uses; no gevent)
is psycopg's own wait. Like psycopg's poll-based wait, it lets an exception raised into the waiting
greenlet (a gevent Timeout, GreenletExit) through; the pool then discards the connection, whose
statement did not finish. Only on Ctrl-C does psycopg's own wait also cancel the statement, and in a
gevent worker Ctrl-C reaches the main greenlet, not a call's.

The database pool makes its connections of this class (`settings.DATABASES`); tests/test_db_wait.py
runs it in a gevent-patched process against psycopg's own wait.

`LifoConnectionPool` is the pool itself (`core.postgresql`, the database backend): it lends
the connection given back last.
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

# libev's EV_READ and EV_WRITE are psycopg's WAIT_R and WAIT_W (1 and 2): a wait state is the event
# mask of the watcher that waits for it, and the events awaited are the readiness reported.
assert (psycopg.waiting.WAIT_R, psycopg.waiting.WAIT_W, psycopg.waiting.WAIT_RW) == (1, 2, 3)


def gevent_patched() -> bool:
    """True in a process whose `select` module gevent has patched (a gevent worker), as psycopg
    checks it to choose its wait."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("select")


def wait_green(gen: Any, fileno: int) -> Any:
    """Run a psycopg generator to its end, each wait a greenlet parked on a gevent io watcher.

    Readiness is reported as the events waited for: libpq's reads and writes are non-blocking, so a
    side that turns out not to be ready yet (possible only when both were awaited) is tried again."""
    from gevent.hub import get_hub

    hub = get_hub()
    try:
        state = next(gen)
        while True:
            watcher = hub.loop.io(fileno, state)
            try:
                hub.wait(watcher)
            finally:
                watcher.close()
            state = gen.send(state)
    except StopIteration as done:
        return done.value


class GreenConnection(psycopg.Connection):
    """The pool's connections: they wait as described above, and keep the cursors of the billing
    statements every call runs (`hot_cursors`, billing/services.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hot_cursors: dict[str, psycopg.Cursor] = {}

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None or not gevent_patched():
            return super().wait(gen, interval=interval, timeout=timeout)
        return wait_green(gen, self.pgconn.socket)


class LifoConnectionPool(ConnectionPool):
    """psycopg_pool's pool, lending the connection given back last first (LIFO) where psycopg_pool lends
    the one idle the longest (FIFO).

    A call borrows a connection twice (reserve, capture) and gives it back in between. In FIFO order
    the two statements of a call, and consecutive calls, went round every idle connection of the
    pool, so each statement ran in a PostgreSQL backend whose memory had gone cold in the CPU's
    caches meanwhile. In LIFO order a quiet process keeps using one hot backend. Measured in-process
    against PostgreSQL with 4 idle connections (8 interleaved rounds of 400 calls): 22 % less
    PostgreSQL CPU per call (813 -> 637 us) and 14 % less wall time per call (docs/benchmarks.md).
    Connections that stay idle now do so at the far end, from which the pool closes the ones unused
    for max_idle, as SQLAlchemy's `pool_use_lifo` does.
    """

    def _get_ready_connection(self, timeout: float | None) -> Any:
        # Called under the pool's lock. psycopg_pool lends from the left end of its deque and puts
        # connections given back on the right: move the last one given back to the left first. The
        # others keep their order, so the longest idle stay leftmost, where shrinking takes from.
        # tests/test_db_pool.py holds this to psycopg_pool's internals.
        if len(self._pool) > 1:
            self._pool.rotate(1)
        return super()._get_ready_connection(timeout)
