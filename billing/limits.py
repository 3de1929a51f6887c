"""Per-credential rate and concurrency limits: rates counted in the Django cache (django-ratelimit),
concurrency slots kept in the cache's Redis through redis-py, whose SET NX PX and a compare-and-delete
script take and give back a slot each in one step.

With REDIS_URL set the cache is Redis, so every process and machine shares one count; without it
(the `make run` default) each worker process counts on its own, in memory.
The group's `rpm` and `concurrency` come from the per-process configuration cache, which every group
save invalidates after commit (core/config_cache.py), so staff changes apply from the next call; so
does an API key's own `rpm` (a key save invalidates the credential cache), counted apart from the
group's. Tokens per minute (`tpm`) are billing/token_limits.py's.

Redis unreachable (core/redis_health.py, docs/failure-modes.md): with GATEWAY_REDIS_FAILURE_MODE=open
(the default) the limits are counted per process meanwhile, in memory, as without REDIS_URL (each
worker process allows up to the limit); with "closed" a call is refused with 503 limits_unavailable
and Retry-After. Giving a slot back never raises: a slot that cannot be deleted expires after
GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import redis
from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from django_ratelimit.core import get_usage

from billing.errors import ConcurrencyLimitExceeded, LimitsUnavailable, RateLimitExceeded
from core.process_identity import process_owner
from core.redis_health import RedisUnavailable, redis_fail_open, redis_guarded
from core.redis_pool import ProcessConnectionPool

logger = logging.getLogger("gateway.billing")

T = TypeVar("T")

RATE_GROUP = "igw.credential.rpm"
KEY_RATE_GROUP = "igw.key.rpm"  # an API key's own rpm, counted apart from its group's
RATE_PERIOD_SECONDS = 60
SLOT_KEY_PREFIX = "igw:concurrency"

# This process's own counters, used only while Redis cannot be reached (fail-open).
_local = LocMemCache("igw-limits-fallback", {"OPTIONS": {"MAX_ENTRIES": 100_000}})


def limits_unavailable() -> LimitsUnavailable:
    """The refusal of a call whose limits cannot be counted (Redis down, failing closed)."""
    return LimitsUnavailable(
        "Usage limits cannot be checked right now; the call was not made and nothing was charged. "
        "Retry after the Retry-After header's seconds.",
        retry_after=max(1, math.ceil(settings.GATEWAY_REDIS_RETRY_SECONDS)),
    )


def _shared_or_local(operation: Callable[[BaseCache], T]) -> tuple[T, bool]:
    """(operation(shared cache), False), or while Redis is down (operation(this process's counters),
    True) when failing open; 503 when failing closed."""
    try:
        return redis_guarded(lambda: operation(cache)), False
    except RedisUnavailable:
        if not redis_fail_open():
            raise limits_unavailable() from None
        return operation(_local), True


def _rate_refused(rpm: int, time_left: int) -> RateLimitExceeded:
    return RateLimitExceeded(
        f"Rate limit reached: this key may make {rpm} requests per minute. Retry after the "
        "Retry-After header's seconds.",
        retry_after=max(1, time_left),
    )


def local_rate_window_end(*, now: int) -> int:
    """When the per-process counters' current window ends (while Redis is down): fixed one-minute
    windows that end on the minute, the same for every key."""
    return now - now % RATE_PERIOD_SECONDS + RATE_PERIOD_SECONDS


def ratelimit_seconds_left(*, time_left: int) -> int:
    """Whole seconds, rounded up, until django-ratelimit's current window ends, from the `time_left`
    it reports: the window ending at second W counts that second too, so it ends at W + 1, while
    `time_left` is W minus the whole seconds now. A client that waits this long (Retry-After) comes
    back in the next window, not in the last second of this one."""
    return time_left + 1


def _rate_window_hit(*, counter: str, limit_key: str, rpm: int, count: bool) -> int | None:
    """Count one request of `limit_key` in `counter`'s current minute: None while it is within
    `rpm`, else the seconds until the window ends. With `count` False nothing is counted: None while
    one more request would be within `rpm`. django-ratelimit's fixed windows, over the Django cache
    (per process while Redis is down and failing open)."""

    def used(store: BaseCache) -> tuple[int, int]:
        if store is cache:
            usage = get_usage(
                None,
                group=counter,
                key=lambda _group, _request: limit_key,
                rate=(rpm, RATE_PERIOD_SECONDS),
                increment=count,
            )
            if usage is None:
                return 0, 0
            return (
                rpm + 1 if usage["should_limit"] else usage["count"],
                ratelimit_seconds_left(time_left=usage["time_left"]),
            )
        # Per process, while Redis is down: the same fixed one-minute windows.
        now = int(time.time())
        window_end = local_rate_window_end(now=now)
        key = f"rate:{counter}:{limit_key}:{window_end}"
        if not count:
            return store.get(key, 0), window_end - now
        store.add(key, 0, timeout=RATE_PERIOD_SECONDS + 1)
        return store.incr(key), window_end - now

    (requests, time_left), _ = _shared_or_local(used)
    return time_left if requests + (0 if count else 1) > rpm else None


def rate_limit_hit(*, limit_key: str, rpm: int, count: bool = True) -> None:
    """Count one request of the credential in the current minute; 429 with Retry-After when it is
    over `rpm` (0 = unlimited): the group's rate, per credential. `count=False` counts nothing and
    refuses when the minute is already full: a pre-check before expensive work, for a call whose
    counting comes later."""
    if rpm <= 0:
        return
    time_left = _rate_window_hit(counter=RATE_GROUP, limit_key=limit_key, rpm=rpm, count=count)
    if time_left is not None:
        raise _rate_refused(rpm, time_left)


def key_rate_limit_hit(*, api_key_id: int, rpm: int | None, count: bool = True) -> None:
    """Count one request against an API key's own `rpm` (None = no limit of its own); 429 with
    Retry-After when it is over. A counter of its own, beside the group's rate that the same call
    counts per credential: the stricter of the two refuses. `count` as in `rate_limit_hit`."""
    if rpm is None or rpm <= 0:
        return
    time_left = _rate_window_hit(
        counter=KEY_RATE_GROUP, limit_key=f"api_key:{api_key_id}", rpm=rpm, count=count
    )
    if time_left is not None:
        raise RateLimitExceeded(
            f"Rate limit reached: this API key's own limit is {rpm} requests per minute. Retry after "
            "the Retry-After header's seconds.",
            retry_after=max(1, time_left),
        )


@dataclass(frozen=True)
class ConcurrencySlot:
    key: str
    token: str
    local: bool = False  # taken from this process's slots while Redis was down


# Delete KEYS[1] only while it still holds ARGV[1]: one step in Redis, so a slot whose lease expired
# and that another call has taken since is never freed by the first call's late release.
_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


def limits_redis_client() -> redis.Redis | None:
    """A redis-py client on the cache's Redis, over the process's shared pool (core/redis_pool.py,
    built from the same URL and options as the cache's, so the same pool); None when the cache is
    not Redis (each process counts its own slots and tokens)."""
    config = settings.CACHES["default"]
    location = config.get("LOCATION")
    if not isinstance(caches["default"], RedisCache) or not location:
        return None
    options = {
        name: value
        for name, value in config.get("OPTIONS", {}).items()
        if name not in ("pool_class", "parser_class", "serializer")
    }
    return redis.Redis(connection_pool=ProcessConnectionPool.from_url(location, **options))


class _LocalSlots:
    """This process's slots (without Redis, or while it is down and failing open): key -> (token,
    lease end on time.monotonic()). One lock makes take and give-back each one step, as in Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, tuple[str, float]] = {}

    def take(self, keys: list[str], token: str, ttl_seconds: int) -> str | None:
        now = time.monotonic()
        with self._lock:
            for key in keys:
                held = self._slots.get(key)
                if held is None or held[1] <= now:
                    self._slots[key] = (token, now + ttl_seconds)
                    return key
        return None

    def give_back(self, key: str, token: str) -> bool:
        with self._lock:
            held = self._slots.get(key)
            if held is None or held[0] != token:
                return False
            del self._slots[key]
            return True


_local_slots = _LocalSlots()


def concurrency_slot_acquire(
    *, limit_key: str, limit: int, ttl_seconds: int | None = None
) -> ConcurrencySlot | None:
    """Take one of the credential's `limit` in-flight slots (0 = unlimited: None, nothing to release);
    429 with Retry-After when all are taken.

    Each slot is its own Redis key, taken with SET NX PX, so two calls can never hold one slot. A slot
    is a lease: it expires after `ttl_seconds` (GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS, far shorter than
    a hold), so a process killed without releasing its slot leaks it for at most that. Without Redis,
    or while it is down and failing open, the slots are this process's own.
    """
    if limit <= 0:
        return None
    ttl = ttl_seconds if ttl_seconds is not None else settings.GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS
    names = [f"{SLOT_KEY_PREFIX}:{limit_key}:{index}" for index in range(limit)]
    # Whose slot it is: `concurrency_slots_release_owner` gives back a dead process's slots.
    token = f"{process_owner()}:{uuid.uuid4().hex}"

    key: str | None
    local = True
    client = limits_redis_client()
    if client is None:
        key = _local_slots.take(names, token, ttl)
    else:
        keys = [cache.make_key(name) for name in names]

        def take() -> str | None:
            for taken in keys:
                if client.set(taken, token, nx=True, px=ttl * 1000):
                    return taken
            return None

        try:
            key, local = redis_guarded(take), False
        except RedisUnavailable:
            if not redis_fail_open():
                raise limits_unavailable() from None
            key = _local_slots.take(names, token, ttl)
    if key is not None:
        return ConcurrencySlot(key=key, token=token, local=local)
    raise ConcurrencyLimitExceeded(
        f"Concurrency limit reached: this key may have {limit} call(s) in flight. Retry when one "
        "has finished.",
        retry_after=1,
    )


def concurrency_slot_release(*, slot: ConcurrencySlot | None) -> None:
    """Give the slot back, unless its lease already expired and another call holds it now: the
    comparison and the delete are one step. Never raises: a slot that cannot be given back (Redis
    down) expires after its lease."""
    if slot is None:
        return
    if slot.local:
        _local_slots.give_back(slot.key, slot.token)
        return
    client = limits_redis_client()
    if client is None:  # the cache stopped being Redis since (a settings change)
        return
    try:
        redis_guarded(lambda: client.eval(_RELEASE_SCRIPT, 1, slot.key, slot.token))
    except RedisUnavailable:
        logger.warning(
            "concurrency slot %s not given back (Redis unreachable); it expires by itself", slot.key
        )
    except Exception:
        logger.exception("concurrency slot %s not given back; it expires by itself", slot.key)


def concurrency_slots_release_owner(*, owner: str) -> int:
    """Give back every concurrency slot the process `owner` (`<instance>:<pid>`,
    core.process_identity) holds in Redis: it has died, and its slots would otherwise stay taken
    until their lease ends. Returns how many were given back; 0 without Redis (each process's slots
    are its own and died with it). SCAN finds the slot keys; each is deleted only while it still
    holds that process's token, in one step."""
    client = limits_redis_client()
    if client is None:
        return 0
    mine = f"{owner}:".encode()
    given_back = 0
    for key in client.scan_iter(match=cache.make_key(f"{SLOT_KEY_PREFIX}:*"), count=1000):
        token = client.get(key)
        if isinstance(token, bytes) and token.startswith(mine):
            given_back += client.eval(_RELEASE_SCRIPT, 1, key, token)
    if given_back:
        logger.warning("gave back %d concurrency slot(s) of process %s, which died", given_back, owner)
    return given_back
