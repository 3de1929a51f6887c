"""Per-credential rate and concurrency limits, counted in the Django cache.

With REDIS_URL set the cache is Redis, so every process and machine shares one count; without it
(the `make run` default) it is a per-process memory cache and each worker process counts on its own.
The group's `rpm` and `concurrency` come from the per-process configuration cache, which every group
save invalidates after commit (core/config_cache.py), so staff changes apply from the next call.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.core.cache import cache
from django_ratelimit.core import get_usage

from core.errors import RateLimited

RATE_GROUP = "igw.credential.rpm"
RATE_PERIOD_SECONDS = 60
SLOT_KEY_PREFIX = "igw:concurrency"


def rate_limit_hit(*, limit_key: str, rpm: int) -> None:
    """Count one request of the credential in the current minute; 429 with Retry-After when it is
    over `rpm` (0 = unlimited). django-ratelimit's fixed windows, over the Django cache."""
    if rpm <= 0:
        return
    usage = get_usage(
        None,
        group=RATE_GROUP,
        key=lambda _group, _request: limit_key,
        rate=(rpm, RATE_PERIOD_SECONDS),
        increment=True,
    )
    if usage is not None and usage["should_limit"]:
        raise RateLimited(
            f"Rate limit reached: this key may make {rpm} requests per minute. Retry after the "
            "Retry-After header's seconds.",
            code="rate_limit_exceeded",
            retry_after=max(1, usage["time_left"]),
        )


@dataclass(frozen=True)
class ConcurrencySlot:
    key: str
    token: str


def concurrency_slot_acquire(*, limit_key: str, limit: int, ttl_seconds: int) -> ConcurrencySlot | None:
    """Take one of the credential's `limit` in-flight slots (0 = unlimited: None, nothing to release);
    429 with Retry-After when all are taken.

    Each slot is its own cache key, taken with `cache.add` (SET NX in Redis), so two calls can never
    hold one slot. Each expires after `ttl_seconds`: a process killed without releasing its slot
    cannot leak it for longer than that.
    """
    if limit <= 0:
        return None
    keys = [f"{SLOT_KEY_PREFIX}:{limit_key}:{index}" for index in range(limit)]
    taken = cache.get_many(keys)
    token = uuid.uuid4().hex
    for key in keys:
        if key not in taken and cache.add(key, token, timeout=ttl_seconds):
            return ConcurrencySlot(key=key, token=token)
    raise RateLimited(
        f"Concurrency limit reached: this key may have {limit} call(s) in flight. Retry when one "
        "has finished.",
        code="concurrency_limit_exceeded",
        retry_after=1,
    )


def concurrency_slot_release(*, slot: ConcurrencySlot | None) -> None:
    """Give the slot back, unless its TTL already expired and another call holds it now."""
    if slot is None:
        return
    if cache.get(slot.key) == slot.token:
        cache.delete(slot.key)
