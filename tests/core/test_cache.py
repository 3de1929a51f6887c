"""The Django cache's Redis connections are shared per process: Django gives every thread, and under
gevent every greenlet, its own cache object, and `ProcessConnectionPool` gives them one pool.

Against a real Redis (REDIS_URL), which lists its client connections."""

from __future__ import annotations

import threading
import uuid

import pytest
import redis
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis: set REDIS_URL")


def connections_named(name: str) -> int:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return sum(1 for entry in client.client_list() if entry["name"] == name)
    finally:
        client.close()


def cache_used_by_threads(options: dict, *, threads: int) -> int:
    """How many Redis connections the cache holds once `threads` threads (all still alive, so their
    cache objects too) have used it one after another."""
    name = f"igw-cache-test-{uuid.uuid4().hex[:8]}"
    config = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": settings.REDIS_URL,
            "KEY_PREFIX": "igw-test",
            "OPTIONS": {**options, "client_name": name},
        }
    }
    one_at_a_time, used, done = threading.Lock(), threading.Semaphore(0), threading.Event()

    def use() -> None:
        with one_at_a_time:
            caches["default"].get("some-key")
        used.release()
        done.wait(10)

    with override_settings(CACHES=config):
        running = [threading.Thread(target=use) for _ in range(threads)]
        for thread in running:
            thread.start()
        for _ in running:
            used.acquire(timeout=10)
        try:
            return connections_named(name)
        finally:
            done.set()
            for thread in running:
                thread.join()


def test_every_thread_of_a_process_shares_one_connection_pool():
    assert cache_used_by_threads({"pool_class": "core.redis_pool.ProcessConnectionPool"}, threads=4) == 1


def test_without_it_every_thread_opens_its_own_connection():
    # Django's own pools: the cost the shared pool removes.
    assert cache_used_by_threads({}, threads=4) == 4
