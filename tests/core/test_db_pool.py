"""Django's connections on PostgreSQL come from Django's own backend and its psycopg_pool pool, sized by
the settings.

PostgreSQL only (psycopg connections to the test database).
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection, connections
from django.db.backends.postgresql import base as postgresql_base
from psycopg_pool import ConnectionPool

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="psycopg connections to the test database: needs PostgreSQL"
    ),
]


def test_the_database_runs_on_djangos_own_postgresql_backend():
    assert connections["default"].settings_dict["ENGINE"] == "django.db.backends.postgresql"
    assert type(connections["default"]) is postgresql_base.DatabaseWrapper


def test_the_default_connection_comes_from_psycopg_pools_pool_when_it_is_on():
    pool = connections["default"].pool
    if pool is None:  # DATABASE_POOL_MAX_SIZE=0: no pool, one connection per thread
        assert not connections["default"].settings_dict["OPTIONS"].get("pool")
        return
    assert type(pool) is ConnectionPool
    assert pool.max_size == settings.DATABASE_POOL_MAX_SIZE
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
