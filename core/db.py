"""What a failed statement does to the pool.

psycopg needs nothing from the project for gevent: from 3.2 on, once gevent has patched `select`,
psycopg waits for its socket through the patched `select` instead of in C, so a query in one greenlet
lets the others run (tests/core/test_db_wait.py).
"""

from __future__ import annotations

import psycopg

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
