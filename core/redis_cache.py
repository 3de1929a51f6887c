"""Django's Redis cache backend, with one client and one connection pool per process.

Django gives every thread its own cache object (`caches` is thread-local), and each of Django's
`RedisCacheClient`s opens its own connection pools and builds a new `redis.Redis` for every operation
(about 80 µs of Python each: option parsing, a response-callback table). Under gevent workers every
greenlet is a "thread" for that purpose: each new client connection to the gateway got a new pool and
a new TCP connection to Redis at its first call. Here the client object is shared by every cache
object of the process with the same servers and options: one `redis.Redis` per pool, thread-safe
(each command borrows a connection from the shared pool), so a process keeps a few Redis connections
whatever its calls in flight.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient

_clients: dict[tuple[Any, ...], RedisCacheClient] = {}
_clients_lock = threading.Lock()


class RedisCacheClient(DjangoRedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            # A race here builds two equivalent clients; either may be kept.
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(DjangoRedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient

    @cached_property
    def _cache(self) -> RedisCacheClient:  # type: ignore[override]
        """The process's client for these servers and options (Django's is per cache object)."""
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        client = _clients.get(key)
        if client is None:
            with _clients_lock:
                client = _clients.get(key)
                if client is None:
                    client = _clients[key] = self._class(self._servers, **self._options)
        return client
