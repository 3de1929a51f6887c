"""The database pool lends the connection given back last (`core.db.LifoConnectionPool`),
and Django's connections on PostgreSQL come from such a pool (`core.postgresql`).

PostgreSQL only (psycopg connections to the test database).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection, connections
from psycopg_pool import ConnectionPool

from core.db import LifoConnectionPool
from core.postgresql.base import DatabaseWrapper
from tests.gunicorn_server import shared_database_url

pytestmark = [
    pytest.mark.django_db,  # the test database, which shared_database_url names once it exists
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="psycopg connections to the test database: needs PostgreSQL"
    ),
]


@pytest.fixture
def pool() -> Iterator[LifoConnectionPool]:
    pool = LifoConnectionPool(shared_database_url(), min_size=1, max_size=4, open=True, max_idle=60)
    pool.wait(timeout=10)
    try:
        yield pool
    finally:
        pool.close()


def _backend_pid(conn) -> int:
    return conn.info.backend_pid


def test_it_lends_the_connection_given_back_last(pool):
    first, second, third = (pool.getconn() for _ in range(3))
    for conn in (first, second, third):
        pool.putconn(conn)

    again = pool.getconn()
    assert again is third
    assert pool.getconn() is second
    pool.putconn(again)
    assert pool.getconn() is third  # given back last again
    assert again.execute("SELECT 1").fetchone() == (1,)


def test_a_quiet_caller_keeps_using_one_backend(pool):
    # Consecutive borrowings with nothing in between (a call's reserve, then its capture) run in the
    # same PostgreSQL backend, however many connections sit idle.
    held = [pool.getconn() for _ in range(4)]
    for conn in held:
        pool.putconn(conn)

    backends = set()
    for _ in range(6):
        with pool.connection() as conn:
            backends.add(_backend_pid(conn))
    assert len(backends) == 1


def test_the_longest_idle_connections_are_the_ones_the_pool_closes_when_it_shrinks(pool):
    first, second, third = (pool.getconn() for _ in range(3))
    for conn in (first, second, third):
        pool.putconn(conn)
    with pool.connection():  # lends and takes back `third`
        pass

    # Every max_idle seconds psycopg_pool closes one connection if some stayed unused since its last
    # check, from the left of its deque: the first check here finds all three were lent since.
    pool._shrink_pool()
    assert not first.closed
    pool._shrink_pool()
    assert first.closed
    assert not second.closed and not third.closed
    assert pool.get_stats()["pool_size"] == 2


def test_django_connections_on_postgresql_come_from_such_a_pool():
    settings_dict = {**connections["default"].settings_dict}
    assert settings_dict["ENGINE"] == "core.postgresql"
    settings_dict["OPTIONS"] = {**settings_dict["OPTIONS"], "pool": {"min_size": 1, "max_size": 2}}
    wrapper = DatabaseWrapper(settings_dict, alias="lifo-pool-test")
    try:
        assert type(wrapper.pool) is LifoConnectionPool
        assert isinstance(wrapper.pool, ConnectionPool)
        assert wrapper.pool is wrapper.pool
        wrapper.ensure_connection()
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    finally:
        wrapper.close()
        wrapper.close_pool()


def test_the_default_connection_uses_it_when_the_pool_is_on():
    pool = connections["default"].pool
    if pool is None:  # DATABASE_POOL_MAX_SIZE=0: no pool, one connection per thread
        assert not connections["default"].settings_dict["OPTIONS"].get("pool")
    else:
        assert type(pool) is LifoConnectionPool
