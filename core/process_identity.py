"""Which process of which gateway instance runs a call: `<instance>:<pid>`.

A gunicorn master names its instance (GATEWAY_INSTANCE_ID, set in gunicorn.conf.py's on_starting and
inherited by its workers); without one (runserver, a management command, tests) the host's name
stands in. A concurrency slot and a hold record the process that took them, so that when a worker
dies the master can give back what that process held at once (`manage.py worker_gone`).
"""

from __future__ import annotations

import os
import socket

INSTANCE_ENV = "GATEWAY_INSTANCE_ID"


def process_owner(*, pid: int | None = None) -> str:
    """`<instance>:<pid>` of this process (or of `pid`, another process of this instance)."""
    instance = os.environ.get(INSTANCE_ENV) or socket.gethostname()
    return f"{instance}:{pid if pid is not None else os.getpid()}"
