"""The Redis cache backend shares one client (and its connection pool) per process: Django gives every
thread, and under gevent every greenlet, its own cache object."""

from __future__ import annotations

import threading

from django.core.cache import caches
from django.test import override_settings

REDIS_CACHE = {
    "default": {
        "BACKEND": "core.redis_cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:6399/0",  # nothing connects: the test sends no command
        "KEY_PREFIX": "igw",
    }
}


def cache_parts() -> tuple[object, object, object]:
    backend = caches["default"]
    client = backend._cache
    return backend, client, client.get_client("some-key")


@override_settings(CACHES=REDIS_CACHE)
def test_every_thread_of_a_process_shares_one_redis_client_and_pool():
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(cache_parts())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seen.append(cache_parts())

    backends = {id(backend) for backend, _, _ in seen}
    assert len(backends) == 4  # Django's cache objects stay per thread
    assert len({id(client) for _, client, _ in seen}) == 1
    assert len({id(redis) for _, _, redis in seen}) == 1
    assert len({id(redis.connection_pool) for _, _, redis in seen}) == 1


@override_settings(CACHES={"default": {**REDIS_CACHE["default"], "LOCATION": "redis://127.0.0.1:6399/1"}})
def test_other_servers_get_their_own_client():
    other = caches["default"]._cache
    with override_settings(CACHES=REDIS_CACHE):
        assert caches["default"]._cache is not other
