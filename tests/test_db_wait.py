"""Waiting for PostgreSQL in gevent workers (`core.db.GreenConnection`): in a process gevent
has patched, as a gunicorn gevent worker is, its connections give the results and errors psycopg's
own connections give, let other greenlets run while they wait, and never go through gevent's
emulated `select.poll`.

PostgreSQL only (psycopg connections to the test database).
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from core.db import GreenConnection, gevent_patched
from tests.gevent_probe import gevent_probe_run
from tests.gunicorn_server import shared_database_url

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.django_db,  # the test database, which shared_database_url names once it exists
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="psycopg connections to the test database: needs PostgreSQL"),
]

SLEEP = 0.3
GREENLETS = 4

# Run in a fresh interpreter patched by gevent (tests/gevent_probe.py). For each connection
# class: GREENLETS greenlets each sleep SLEEP s in PostgreSQL on their own connection; then an error,
# a large answer, a large parameter (its send cannot finish in one write), and a connection whose
# backend was terminated. Prints what each gave and how many gevent poll objects it made.
PROBE = """
import json, sys, time

import gevent
import psycopg

from core.db import GreenConnection, gevent_patched

url, sleep, greenlets = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])


def outcome(cls, sql, params=None):
    try:
        with cls.connect(url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()[0]
    except psycopg.Error as error:
        return type(error).__name__


def probe(cls):
    polls[0] = 0
    started = time.monotonic()
    jobs = [
        gevent.spawn(outcome, cls, "SELECT %s::int FROM pg_sleep(%s)", (i, sleep)) for i in range(greenlets)
    ]
    gevent.joinall(jobs, raise_error=True)
    elapsed = time.monotonic() - started
    with cls.connect(url, autocommit=True) as doomed, cls.connect(url, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (doomed.info.backend_pid,))
        try:
            doomed.execute("SELECT 1")
            terminated = "answered"
        except psycopg.Error as error:
            terminated = type(error).__name__
    return {
        "slept": [job.value for job in jobs],
        "elapsed": elapsed,
        "error": outcome(cls, "SELECT 1 / 0"),
        "large answer": outcome(cls, "SELECT length(repeat('x', 5000000))"),
        "large parameter": outcome(cls, "SELECT length(%s)", ("y" * 5_000_000,)),
        "terminated": terminated,
        "polls": polls[0],
    }


print(json.dumps({
    "patched": gevent_patched(),
    "green": probe(GreenConnection),
    "psycopg": probe(psycopg.Connection),
}))
"""


def test_it_waits_on_gevent_watchers_with_psycopgs_results_and_errors():
    report = gevent_probe_run(PROBE, shared_database_url(), str(SLEEP), str(GREENLETS))
    green, plain = report["green"], report["psycopg"]

    assert report["patched"] is True
    assert green["slept"] == plain["slept"] == list(range(GREENLETS))
    assert green["error"] == plain["error"] == "DivisionByZero"
    assert green["large answer"] == plain["large answer"] == 5_000_000
    assert green["large parameter"] == plain["large parameter"] == 5_000_000
    assert green["terminated"] == plain["terminated"] != "answered"
    # The greenlets slept side by side (one after another would take GREENLETS x SLEEP) ...
    assert green["elapsed"] < 2 * SLEEP
    # ... waiting on gevent's watchers, where psycopg's own wait makes a gevent poll object each time.
    assert green["polls"] == 0
    assert plain["polls"] > 0


def test_outside_gevent_it_is_psycopgs_own_connection():
    assert gevent_patched() is False
    with GreenConnection.connect(shared_database_url(), autocommit=True) as conn:
        assert conn.execute("SELECT %s::int + 1", (41,)).fetchone() == (42,)
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
