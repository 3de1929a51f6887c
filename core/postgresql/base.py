"""Django's PostgreSQL backend (and its psycopg_pool pool), with one addition: closing the pool also
gives back the connection the billing statements keep out of it (core/db.py), so that closing the
pool closes every connection it lent, as Django expects before it drops or clones a database."""

from __future__ import annotations

from django.db.backends.postgresql import base

from core.db import pooled_connection_release_kept


class DatabaseWrapper(base.DatabaseWrapper):
    def close_pool(self) -> None:
        pool = self.pool  # None without OPTIONS["pool"], as in Django's own close_pool
        if pool is not None:
            pooled_connection_release_kept(pool=pool)
        super().close_pool()
