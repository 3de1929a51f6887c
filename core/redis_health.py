"""Whether this process may use Redis now: one shared answer for everything that keeps state there
(rate and concurrency limits, the configuration generation, the upstream circuit breaker).

Redis is an optimisation and a place for shared counters, not a store of record: when it cannot be
reached, each use falls back as docs/failure-modes.md says and the call goes on. So that an outage
costs no call a connect timeout, the first failure marks Redis down in this process and nothing
tries it again for GATEWAY_REDIS_RETRY_SECONDS; the first call after that tries again, and its
success ends the outage. The outage is logged twice per process, once when it starts ("gateway
degraded") and once when it ends ("gateway recovered"), never per call; `redis_degraded()` says so
to code (and to a health check).

Use it around a Redis operation:

    try:
        value = redis_guarded(lambda: cache.get(key))
    except RedisUnavailable:
        value = fallback()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import redis
from django.conf import settings

logger = logging.getLogger("gateway.redis")

T = TypeVar("T")

# What "Redis cannot be reached" raises: redis-py's errors (connection refused, timeouts, a server
# that answers LOADING or READONLY) and the socket's own.
REDIS_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)


class RedisUnavailable(Exception):
    """Redis failed just now, or failed less than GATEWAY_REDIS_RETRY_SECONDS ago and was not tried."""


_lock = threading.Lock()
_failed_at: float | None = None  # time.monotonic() of the latest failure; None while Redis works
_degraded_since: float | None = None


def redis_available() -> bool:
    """False while Redis failed less than GATEWAY_REDIS_RETRY_SECONDS ago: do not try it."""
    failed_at = _failed_at
    return failed_at is None or time.monotonic() - failed_at >= settings.GATEWAY_REDIS_RETRY_SECONDS


def redis_degraded() -> bool:
    """True from a failure of Redis until the next success: the gateway runs on its fallbacks."""
    return _degraded_since is not None


def redis_fail_open() -> bool:
    """GATEWAY_REDIS_FAILURE_MODE: "open" (default) serves calls on per-process limits while Redis is
    down; "closed" refuses them with 503."""
    return settings.GATEWAY_REDIS_FAILURE_MODE == "open"


def redis_failure_record(error: BaseException) -> None:
    """Mark Redis down in this process; the first failure of an outage logs it."""
    global _failed_at, _degraded_since
    with _lock:
        first = _degraded_since is None
        now = time.monotonic()
        _failed_at = now
        if first:
            _degraded_since = now
    if first:
        logger.warning(
            "gateway degraded: Redis unreachable (%s: %s); GATEWAY_REDIS_FAILURE_MODE=%s, trying "
            "again every %s s",
            type(error).__name__,
            error,
            settings.GATEWAY_REDIS_FAILURE_MODE,
            settings.GATEWAY_REDIS_RETRY_SECONDS,
        )


def redis_success_record() -> None:
    """Redis answered: end the outage, if there was one."""
    global _failed_at, _degraded_since
    if _failed_at is None and _degraded_since is None:
        return
    with _lock:
        since, _failed_at, _degraded_since = _degraded_since, None, None
    if since is not None:
        logger.warning("gateway recovered: Redis reachable again after %.1f s", time.monotonic() - since)


def redis_guarded(operation: Callable[[], T]) -> T:
    """`operation()` (one or a few Redis commands), or RedisUnavailable: at once, without trying,
    while Redis is marked down; after a failure, which marks it down."""
    if not redis_available():
        raise RedisUnavailable("Redis is marked down")
    try:
        result = operation()
    except REDIS_ERRORS as error:
        redis_failure_record(error)
        raise RedisUnavailable(str(error)) from error
    redis_success_record()
    return result


def redis_guarded_now(operation: Callable[[], T]) -> T:
    """As `redis_guarded`, but tried even while Redis is marked down (a write that must not be
    skipped, e.g. invalidating the configuration caches); a failure still marks it down."""
    try:
        result = operation()
    except REDIS_ERRORS as error:
        redis_failure_record(error)
        raise RedisUnavailable(str(error)) from error
    redis_success_record()
    return result
