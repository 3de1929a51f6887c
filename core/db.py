"""Whether this process runs under gevent's patching (a gunicorn gevent worker).

psycopg needs nothing from the project for gevent: from 3.2 on, once gevent has patched `select`,
psycopg waits for its socket through the patched `select` instead of in C, so a query in one greenlet
lets the others run (tests/test_db_wait.py). Other blocking code checks the same condition here.
"""

from __future__ import annotations

import sys


def gevent_patched() -> bool:
    """True in a process whose `select` module gevent has patched (a gevent worker), as psycopg
    checks it to choose its wait."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("select")
