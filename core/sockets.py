"""Whether a socket has something to read, asked of the operating system without waiting.

Used before a pooled connection is reused (`upstreams.providers.headers`). In a gevent worker,
`select.poll` is gevent's emulation (a watcher and result objects per call, and a trip through the
hub); a check that must not wait gains nothing from it, so this asks the OS's own poll."""

from __future__ import annotations

import select
import sys
from collections.abc import Callable
from typing import Any

from core.db import gevent_patched


def _os_poll() -> Callable[[], Any] | None:
    """The operating system's `select.poll`, also where gevent has patched `select` (None without
    poll)."""
    if gevent_patched():
        return sys.modules["gevent.monkey"].get_original("select", "poll")
    return getattr(select, "poll", None)


def readable_now(sock: Any) -> bool | None:
    """Whether reading `sock` would not block right now (data, end of file or an error is waiting),
    as urllib3's `wait_for_read(sock, timeout=0.0)` answers it; None where there is no poll."""
    poll = _os_poll()
    if poll is None:
        return None
    poller = poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
