"""The database pool's connection class, and whether this process runs under gevent's patching.

psycopg needs nothing from the project for gevent: from 3.2 on, once gevent has patched `select`,
psycopg waits for its socket through the patched `select` instead of in C, so a query in one greenlet
lets the others run (tests/test_db_wait.py). Other blocking code checks the same condition here.
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg


def gevent_patched() -> bool:
    """True in a process whose `select` module gevent has patched (a gevent worker), as psycopg
    checks it to choose its wait."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("select")


class StatementConnection(psycopg.Connection):
    """The connection pool's connections (settings: OPTIONS["pool"]["connection_class"], psycopg_pool's
    public option). Each keeps the cursors of the billing statements it has run
    (`billing.statements.statement_run`), so the next run of a statement on it reuses its cursor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statement_cursors: dict[str, psycopg.Cursor] = {}
