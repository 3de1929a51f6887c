"""One Redis connection pool per process for the Django cache.

Django gives every thread its own cache object, and each makes its own connection pools: under gevent
every greenlet counts as a thread, so every new client connection to the gateway opened a new pool and
a new connection to Redis at its first cache call. Named as `pool_class` in the cache's OPTIONS (a
documented option of Django's Redis backend), this class gives every cache object of the process the
same pool for the same server and options; redis-py makes a child process a pool of its own after a
fork.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import redis


class ProcessConnectionPool(redis.ConnectionPool):
    _shared: ClassVar[dict[str, ProcessConnectionPool]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> ProcessConnectionPool:
        key = repr((url, sorted(kwargs.items())))
        pool = cls._shared.get(key)
        if pool is None:
            with cls._shared_lock:
                pool = cls._shared.get(key)
                if pool is None:
                    pool = cls._shared[key] = super().from_url(url, **kwargs)
        return pool
