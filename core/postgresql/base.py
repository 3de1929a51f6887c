"""Django's PostgreSQL backend whose connection pool (`OPTIONS["pool"]`) is a `LifoConnectionPool`.

Django builds psycopg_pool's `ConnectionPool` itself, once per database alias and process, and offers
no setting for the class. The pool is made as Django makes it and then given the subclass, which only
changes the order in which idle connections are lent (no state of its own)."""

from __future__ import annotations

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool

from core.db import LifoConnectionPool


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        pool = super().pool
        if type(pool) is ConnectionPool:
            pool.__class__ = LifoConnectionPool
        return pool
