"""Waiting for PostgreSQL in gevent workers: psycopg's own connections, in a process gevent has
patched (as a gunicorn gevent worker is), give their usual results and errors and let other greenlets
run while they wait (psycopg 3.2+ leaves its C wait for the patched `select` there).

PostgreSQL only (psycopg connections to the test database).
"""

from __future__ import annotations

import pytest
from django.db import connection

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

# Run in a fresh interpreter patched by gevent (tests/gevent_probe.py): GREENLETS greenlets each sleep
# SLEEP s in PostgreSQL on their own connection; then an error, a large answer, a large parameter (its
# send cannot finish in one write), and a connection whose backend was terminated.
PROBE = """
import json, sys, time

import gevent
import psycopg
import psycopg.waiting
from gevent import monkey

url, sleep, greenlets = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])


def outcome(sql, params=None):
    try:
        with psycopg.Connection.connect(url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()[0]
    except psycopg.Error as error:
        return type(error).__name__


started = time.monotonic()
jobs = [gevent.spawn(outcome, "SELECT %s::int FROM pg_sleep(%s)", (i, sleep)) for i in range(greenlets)]
gevent.joinall(jobs, raise_error=True)
elapsed = time.monotonic() - started
with psycopg.connect(url, autocommit=True) as doomed, psycopg.connect(url, autocommit=True) as other:
    other.execute("SELECT pg_terminate_backend(%s)", (doomed.info.backend_pid,))
    try:
        doomed.execute("SELECT 1")
        terminated = "answered"
    except psycopg.Error as error:
        terminated = type(error).__name__

print(json.dumps({
    "patched": monkey.is_module_patched("select"),
    "wait": psycopg.waiting.wait.__name__,
    "slept": [job.value for job in jobs],
    "elapsed": elapsed,
    "error": outcome("SELECT 1 / 0"),
    "large answer": outcome("SELECT length(repeat('x', 5000000))"),
    "large parameter": outcome("SELECT length(%s)", ("y" * 5_000_000,)),
    "terminated": terminated,
}))
"""


def test_psycopg_lets_other_greenlets_run_while_it_waits_with_its_usual_results_and_errors():
    report = gevent_probe_run(PROBE, shared_database_url(), str(SLEEP), str(GREENLETS))

    assert report["patched"] is True
    assert report["wait"] != "wait_c"  # psycopg's C wait would block the whole worker
    assert report["slept"] == list(range(GREENLETS))
    # The greenlets slept side by side (one after another would take GREENLETS x SLEEP).
    assert report["elapsed"] < 2 * SLEEP
    assert report["error"] == "DivisionByZero"
    assert report["large answer"] == 5_000_000
    assert report["large parameter"] == 5_000_000
    assert report["terminated"] != "answered"
