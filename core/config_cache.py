"""Per-process caches of what rarely changes (credentials, groups, models, upstreams), kept exact by
one shared counter: the configuration generation.

Every entry is stored with the generation it was read under and is used only while the shared counter
(one key in the Django cache, i.e. Redis) still holds that value. Every write that can change a cached
answer bumps the counter once its transaction has committed (`config_generation_bump_on_commit`), so
at its next request every process on every machine drops what it held: a revoked key or a deactivated
user is refused at once everywhere, and a price or upstream change applies to the next call.

The counter is taken at most once per request (the memo is reset by Django's `request_started`);
outside a request (commands, tests calling services) on every use. Taking it asks Redis only when
Redis has said something since the last read: the push watch (core/config_watch.py) keeps one
Redis connection per process on which Redis reports the moment the counter's key changes. The models
whose writes bump the counter are registered by the apps that own them (core/config_registry.py).
Caching is on only when the cache is shared between processes (REDIS_URL); without it, or when Redis
cannot be reached, callers query the database as if there were no cache. Entries also expire after
GATEWAY_CONFIG_CACHE_SECONDS, a backstop should a bump ever be lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.db import transaction

from core.config_watch import GENERATION_KEY, config_cache_enabled, generation_watch
from core.redis_health import RedisUnavailable, redis_available, redis_guarded, redis_guarded_now
from core.request_scope import in_request

__all__ = [
    "GENERATION_KEY",
    "GenerationCache",
    "config_cache_enabled",
    "config_caches_clear",
    "config_generation",
    "config_generation_bump",
    "config_generation_bump_on_commit",
    "local_state_register",
]

logger = logging.getLogger("gateway.cache")

V = TypeVar("V")

_local = threading.local()
_caches: list[GenerationCache[Any]] = []
_local_state_clears: list[Callable[[], None]] = []


def local_state_register(clear: Callable[[], None]) -> None:
    """Have `clear` called with the caches: other per-process views of shared state (the circuit
    breaker's) are dropped by every configuration change, and between tests."""
    _local_state_clears.append(clear)


def config_generation() -> int | None:
    """The shared generation (memoized for the current request), or None when caching is off or the
    shared cache cannot be read: then nothing may be served from a cache."""
    if not config_cache_enabled():
        return None
    serving = in_request()
    if serving and hasattr(_local, "generation"):
        memoized: int | None = _local.generation
        return memoized
    watch = generation_watch()
    generation = watch.generation()
    if generation is None and not redis_available():
        return None  # Redis failed a moment ago: not tried again before GATEWAY_REDIS_RETRY_SECONDS
    if generation is None:
        generation = watch.read(_generation_get)
    if serving:
        _local.generation = generation
    return generation


def _generation_get() -> int | None:
    """The counter as Redis holds it now (one round trip), or None when Redis cannot be read."""

    def read() -> Any:
        value = cache.get(GENERATION_KEY)
        if value is None:
            # First use (or Redis lost the key): start a counter, from the clock so that it cannot
            # come back to a value some process still holds entries under. `add` keeps a concurrent bump.
            cache.add(GENERATION_KEY, time.time_ns() // 1_000_000, timeout=None)
            value = cache.get(GENERATION_KEY)
        return value

    try:
        value = redis_guarded(read)
    except RedisUnavailable:
        # Redis down (logged once per outage by redis_health): no cache, the database answers every
        # read until Redis is back; not even tried for GATEWAY_REDIS_RETRY_SECONDS after a failure.
        return None
    return int(value) if value is not None else None


def config_generation_bump() -> None:
    """Invalidate every process's cached configuration now (this process's at once, the others' at
    their next request)."""
    if settings.REDIS_URL:

        def bump() -> None:
            try:
                cache.incr(GENERATION_KEY)
            except ValueError:  # no counter yet: any value differs from what no entry was stored under
                cache.set(GENERATION_KEY, time.time_ns() // 1_000_000, timeout=None)

        try:
            # Tried even while Redis is marked down: a lost bump is worse than a refused connection.
            redis_guarded_now(bump)
        except Exception:
            # The entries still expire after GATEWAY_CONFIG_CACHE_SECONDS; say loudly that until then
            # a change may not be seen by every process.
            logger.error(
                "could not bump the configuration generation; caches expire within %s s",
                settings.GATEWAY_CONFIG_CACHE_SECONDS,
                exc_info=True,
            )
    config_caches_clear()


def config_generation_bump_on_commit() -> None:
    """Bump once the current transaction commits (at once outside one): a bump before the commit would
    let another process cache the old rows again in between. A transaction writing N rows bumps N
    times (one INCR each, at commit); writes of configuration are rare."""
    transaction.on_commit(config_generation_bump)


def config_caches_clear() -> None:
    """Drop this process's entries (tests call it between tests)."""
    _local.__dict__.pop("generation", None)
    generation_watch().forget()
    for entry_cache in _caches:
        entry_cache.clear()
    for clear in _local_state_clears:
        clear()


class GenerationCache(Generic[V]):
    """A bounded per-process map whose entries are valid for one generation and a maximum age."""

    def __init__(self, *, name: str, max_entries: int = 10_000) -> None:
        self.name = name
        self.max_entries = max_entries
        self._entries: dict[Any, tuple[int, float, V]] = {}
        self._lock = threading.Lock()
        _caches.append(self)

    def get_or_load(self, key: Any, load: Callable[[], V]) -> V:
        """The cached value for `key` under the current generation, else `load()` (cached when the
        generation is known)."""
        generation = config_generation()
        if generation is None:
            return load()
        now = time.monotonic()
        entry = self._entries.get(key)
        max_age = settings.GATEWAY_CONFIG_CACHE_SECONDS
        if entry is not None and entry[0] == generation and now - entry[1] < max_age:
            return entry[2]
        value = load()
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # rare; cheaper and simpler than LRU bookkeeping on every hit
            self._entries[key] = (generation, now, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _request_started(**_: Any) -> None:
    _local.__dict__.pop("generation", None)


def _request_finished(**_: Any) -> None:
    _local.__dict__.pop("generation", None)


request_started.connect(_request_started, dispatch_uid="config_generation_request_started")
request_finished.connect(_request_finished, dispatch_uid="config_generation_request_finished")
