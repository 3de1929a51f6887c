"""The database pool's connection class, and the connection a process's statements share first.

psycopg needs nothing from the project for gevent: from 3.2 on, once gevent has patched `select`,
psycopg waits for its socket through the patched `select` instead of in C, so a query in one greenlet
lets the others run (tests/test_db_wait.py).

psycopg_pool lends its idle connections first in, first out: once a burst has grown a worker's pool
to 16 connections, each statement of a quiet period runs on the one idle the longest, whose
PostgreSQL backend has slept for seconds and wakes cold. The billing statements borrow through
`pooled_connection_borrow` / `pooled_connection_give_back` instead: the connection the process's last
statement gave back is kept (one per pool, out of the pool) and lent first, so a call's reserve runs
on the backend that ran the previous call's capture a moment before, and the pool's other connections
are lent only when that one is busy (docs/benchmarks.md, "What changed"). The backend subclass in
`core/postgresql/` closes it with the pool.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool


class StatementConnection(psycopg.Connection):
    """The connection pool's connections (settings: OPTIONS["pool"]["connection_class"], psycopg_pool's
    public option). Each keeps the cursors of the billing statements it has run
    (`billing.statements.statement_run`), so the next run of a statement on it reuses its cursor, and
    when it was opened, so that it is kept out of the pool no longer than the pool would keep it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statement_cursors: dict[str, psycopg.Cursor] = {}
        self.opened_at = time.monotonic()


# What PostgreSQL answers, instead of running it, to the next statement on a session it has ended
# (admin_shutdown: a fast or smart shutdown, a restart, pg_terminate_backend; crash_shutdown;
# cannot_connect_now): the statement did not run, so running it again cannot apply it twice.
SESSION_ENDED_STATES = frozenset({"57P01", "57P02", "57P03"})


def session_ended_before_statement(error: BaseException) -> bool:
    """True when `error` (psycopg's, or Django's wrapping of it) says the server had ended the session
    before the statement ran."""
    for candidate in (error, error.__cause__):
        if isinstance(candidate, psycopg.Error) and candidate.sqlstate in SESSION_ENDED_STATES:
            return True
    return False


def database_reconnect() -> bool:
    """After a statement failed on a broken connection (PostgreSQL restarted, its backends
    terminated): drop this thread's connection so the next statement opens a working one. With a pool,
    also check the pool's idle connections (psycopg_pool's `check`, one `SELECT 1` each, on this rare
    path only), which were broken by the same restart and would each fail one more statement. False
    inside an atomic block, where a new connection cannot continue the transaction."""
    from django.db import connection

    if connection.in_atomic_block:
        return False
    connection.close()
    pool = getattr(connection, "pool", None) if connection.vendor == "postgresql" else None
    if pool is not None:
        pooled_connection_release_kept(pool=pool)  # broken by the same restart, most likely
        pool.check()
    return True


def pooled_connection_release_idle() -> None:
    """Give this thread's (greenlet's) pooled Django connection back to the pool now, before work that
    needs no database for a while (a password hash): the pool is bounded, and the process's billed
    calls need its connections meanwhile. The next query takes one again. Nothing without a pool, or
    inside an atomic block (the transaction needs its connection)."""
    from django.db import connection

    if connection.vendor != "postgresql" or getattr(connection, "pool", None) is None:
        return
    if connection.in_atomic_block:
        return
    connection.close()


# Per pool, the connection kept for its next statement. A WeakKeyDictionary's `pop` and `setdefault`
# are single operations on its dict, so two threads never take the same connection nor keep two.
_kept: weakref.WeakKeyDictionary[ConnectionPool, psycopg.Connection] = weakref.WeakKeyDictionary()


def pooled_connection_borrow(*, pool: ConnectionPool) -> psycopg.Connection:
    """A connection for one statement: the one kept from the last statement when there is one (it is
    this borrower's alone until given back), else one of the pool's."""
    conn = _kept.pop(pool, None)
    if conn is None:
        return pool.getconn()
    if conn.closed:
        pool.putconn(conn)  # the pool discards a closed connection
        return pool.getconn()
    return conn


def pooled_connection_give_back(*, pool: ConnectionPool, conn: psycopg.Connection, reusable: bool) -> None:
    """After the statement: keep `conn` for the process's next statement when it is `reusable` (the
    statement succeeded), idle, its pool open, younger than the pool's max_lifetime (past it the pool
    replaces it) and no other connection is kept; otherwise give it back to the pool, which checks
    its state and discards a broken one."""
    if (
        reusable
        and not pool.closed
        and conn.info.transaction_status == TransactionStatus.IDLE
        and time.monotonic() - conn.opened_at < pool.max_lifetime
        and _kept.setdefault(pool, conn) is conn
    ):
        return
    pool.putconn(conn)


def pooled_connection_release_kept(*, pool: ConnectionPool) -> None:
    """Give the kept connection back to the pool: before the pool closes (which closes the
    connections it holds), or when PostgreSQL may have broken it (`database_reconnect`)."""
    conn = _kept.pop(pool, None)
    if conn is not None:
        pool.putconn(conn)
