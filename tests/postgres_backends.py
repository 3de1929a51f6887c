"""PostgreSQL's backends, seen and ended from a connection of their own to the test database (not the
pool's, and not Django's): what an administrator, or a restart, does to the gateway's connections."""

from __future__ import annotations

import time

import psycopg
from django.db import connection


def _side_connection() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"] or None, user=db["USER"], password=db["PASSWORD"], dbname=db["NAME"]
    )


def backends_terminate(*, pid: int | None = None) -> None:
    """End one backend (`pid`), or every backend of the test database but this side connection's."""
    with _side_connection() as conn:
        if pid is None:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        else:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])


def backends_alive(pids: set[int]) -> set[int]:
    """Which of `pids` are still backends of the server."""
    with _side_connection() as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [list(pids)]).fetchall()
    return {row[0] for row in rows}


def backends_gone_await(pids: set[int], *, seconds: float = 5.0) -> set[int]:
    """Wait up to `seconds` for `pids` to end (a terminated or closed backend exits shortly after);
    the ones still alive then."""
    deadline = time.monotonic() + seconds
    while (alive := backends_alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive
