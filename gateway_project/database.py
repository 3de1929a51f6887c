"""The database pool's connection class (settings: OPTIONS["pool"]["connection_class"], psycopg_pool's
public option): project wiring the settings name, so they import no app."""

from __future__ import annotations

from typing import Any

import psycopg


class StatementConnection(psycopg.Connection):
    """The connection pool's connections. Each keeps the cursors of the billing statements it has run
    (`billing.statements.statement_run`), so the next run of a statement on it reuses its cursor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statement_cursors: dict[str, psycopg.Cursor] = {}
