"""Whether the running code serves a request, for work that can wait until the request has answered.

Django's `request_started` and `request_finished` mark it, per thread (per greenlet in a gevent
worker, whose `threading.local` is the greenlet's). For a streamed answer `request_finished` comes
once the server has sent its end. Work that would only wake another process on a call's way (the
configuration watch's PING, the circuit breaker's call counts) checks `in_request()` and leaves
itself for its module's `request_finished` receiver; outside a request (management commands, tests
calling services) it runs at once.
"""

from __future__ import annotations

import threading
from typing import Any

from django.core.signals import request_finished, request_started

_local = threading.local()


def in_request() -> bool:
    """True between this thread's `request_started` and its `request_finished`."""
    return getattr(_local, "active", False)


def _started(**_: Any) -> None:
    _local.active = True


def _finished(**_: Any) -> None:
    _local.active = False


request_started.connect(_started, dispatch_uid="core_request_scope_started")
request_finished.connect(_finished, dispatch_uid="core_request_scope_finished")
