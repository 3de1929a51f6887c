"""The billing statements run first on the connection the process's last statement gave back
(core/db.py): psycopg_pool lends the connection idle the longest, whose backend wakes cold, so a
quiet period's reserve would otherwise never run on the backend the previous capture just used.

PostgreSQL with the connection pool only.
"""

from __future__ import annotations

import pytest
from django.db import DataError, connection

from billing.statements import statement_run
from core.db import database_reconnect, pooled_connection_borrow, pooled_connection_give_back
from tests.markers import POOLED_POSTGRES
from tests.postgres_backends import backends_gone_await, backends_terminate

pytestmark = [
    *POOLED_POSTGRES,
    pytest.mark.django_db(transaction=True),  # statements borrow a connection only outside a transaction
]

BACKEND = "SELECT pg_backend_pid()"


def _backend() -> int:
    row = statement_run(BACKEND, {})
    assert row is not None
    return int(row[0])


def _pool_grown(size: int):
    """The pool with `size` idle connections, as after a burst of concurrent calls."""
    pool = connection.pool
    pool.open()
    borrowed = [pool.getconn() for _ in range(size)]
    for raw in borrowed:
        pool.putconn(raw)
    connection.close()
    return pool


def test_consecutive_statements_run_on_the_backend_the_last_one_used_though_the_pool_has_others():
    pool = _pool_grown(3)

    backends = [_backend() for _ in range(5)]

    assert len(set(backends)) == 1
    assert connection.connection is None  # still borrowed per statement, not the thread's connection
    assert pool.get_stats()["pool_available"] >= 2  # the others wait in the pool


def test_the_pool_alone_would_lend_another_backend_each_time():
    """What the kept connection is for: psycopg_pool lends first in, first out."""
    pool = _pool_grown(3)
    pids = []
    for _ in range(3):
        raw = pool.getconn()
        pids.append(raw.info.backend_pid)
        pool.putconn(raw)

    assert len(set(pids)) == 3


def test_while_the_kept_connection_is_busy_a_statement_gets_one_of_the_pools():
    pool = _pool_grown(2)
    kept_backend = _backend()
    busy = pooled_connection_borrow(pool=pool)  # as a concurrent call's statement would
    try:
        assert busy.info.backend_pid == kept_backend
        other = _backend()
        assert other != kept_backend
    finally:
        pooled_connection_give_back(pool=pool, conn=busy, reusable=True)

    # One connection is kept, the one given back first; the busy one went back to the pool.
    assert _backend() == other


def test_a_failed_statements_connection_goes_back_to_the_pool_not_kept():
    pool = _pool_grown(2)
    kept_backend = _backend()
    available = pool.get_stats()["pool_available"]

    with pytest.raises(DataError):
        statement_run("SELECT 1 / %(zero)s", {"zero": 0})

    # The failed statement had the kept connection; the pool took it back (and checked its state),
    # and the next statement gets the pool's longest idle one.
    assert pool.get_stats()["pool_available"] == available + 1
    assert _backend() != kept_backend


def test_closing_the_pool_closes_the_kept_connection():
    _pool_grown(2)
    kept_backend = _backend()

    connection.close_pool()  # as Django does before it drops or clones the test database

    assert backends_gone_await({kept_backend}) == set()
    assert isinstance(_backend(), int)  # a new pool, lending again


def test_a_statement_that_ends_after_its_pool_closed_closes_its_connection_instead_of_keeping_it():
    pool = _pool_grown(2)
    raw = pooled_connection_borrow(pool=pool)  # a statement running while the pool closes
    backend = raw.info.backend_pid

    connection.close_pool()
    pooled_connection_give_back(pool=pool, conn=raw, reusable=True)

    assert raw.closed
    assert backends_gone_await({backend}) == set()


def test_a_statement_that_meets_a_kept_connection_ended_meanwhile_runs_again_on_a_working_one():
    _pool_grown(2)
    kept_backend = _backend()
    backends_terminate(pid=kept_backend)  # PostgreSQL restarted, or an administrator ended the backend
    backends_gone_await({kept_backend})

    first = _backend()  # the ended session answered admin_shutdown: the statement had not run

    assert first != kept_backend
    assert _backend() == first  # kept again, and working


def test_reconnecting_after_a_restart_gives_the_kept_connection_back_to_the_pools_check():
    pool = _pool_grown(2)
    kept_backend = _backend()
    backends_terminate(pid=kept_backend)
    backends_gone_await({kept_backend})

    assert database_reconnect() is True

    # The broken connection was checked with the pool's others and discarded: no statement fails.
    assert _backend() != kept_backend
    assert pool.get_stats()["pool_available"] >= 1


def test_a_connection_is_kept_no_longer_than_the_pools_max_lifetime(monkeypatch):
    pool = _pool_grown(2)
    monkeypatch.setattr(pool, "max_lifetime", 0.0)
    available = pool.get_stats()["pool_available"]

    _backend()

    assert pool.get_stats()["pool_available"] == available  # given back, not kept
