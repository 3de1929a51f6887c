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


_this: tuple[int, str] | None = None  # (pid, its owner): computed once per process, after a fork too


def process_owner(*, pid: int | None = None) -> str:
    """`<instance>:<pid>` of this process (or of `pid`, another process of this instance)."""
    global _this
    if pid is None:
        current = os.getpid()
        if _this is None or _this[0] != current:
            _this = (current, _owner(current))
        return _this[1]
    return _owner(pid)


def _owner(pid: int) -> str:
    return f"{os.environ.get(INSTANCE_ENV) or socket.gethostname()}:{pid}"
