"""CPU-bound work off a gevent worker's event loop.

A gevent worker runs every call of its process as a greenlet of one OS thread: while one call
computes (a password hash, decoding a 16-megapixel upload) no other call of the process moves.
`cpu_bound` runs such work in the hub's pool of native threads and parks only the calling greenlet;
the others keep running while the work releases the GIL (hashlib's PBKDF2, Pillow's decoders and
zlib do). Without gevent (gthread workers, tests, management commands) it simply calls the function:
each call already has its own thread there.

The function runs in another OS thread: it must not use the database connection or anything else
that belongs to the calling request.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def gevent_patched() -> bool:
    """True in a process whose threading module gevent has patched (a gunicorn gevent worker)."""
    if "gevent" not in sys.modules:  # never import gevent into a process that does not use it
        return False
    from gevent import monkey

    return bool(monkey.is_module_patched("threading"))


def cpu_bound(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`, on gevent's native thread pool when the process is gevent-patched;
    its result is returned and its exception raised here either way."""
    if not gevent_patched():
        return fn(*args, **kwargs)
    import gevent

    return gevent.get_hub().threadpool.apply(fn, args, kwargs)
