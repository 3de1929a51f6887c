"""Markers shared by test modules."""

from __future__ import annotations

import pytest
from django.db import connection

# PostgreSQL with the connection pool: tests of what holds a database connection when.
POOLED_POSTGRES = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not connection.settings_dict.get("OPTIONS", {}).get("pool"),
        reason="needs PostgreSQL with its connection pool (DATABASE_POOL_MAX_SIZE > 0)",
    ),
]
