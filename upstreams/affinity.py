"""Cache-aware ("sticky") routing: the calls of one conversation go to the upstream that answered it.

A provider's prompt cache lives per account: a conversation spread over several upstreams of a model
misses the cache at each switch. So a call that names its conversation (the caller's key for it, e.g.
`prompt_cache_key`; the endpoint family says which field) goes first to the upstream that last
answered that conversation on that model, among the upstreams of that upstream's priority: it takes
the place of the weighted draw and never puts a fallback (a higher priority number) before a preferred
upstream. An upstream disabled since is no longer among the model's upstreams, and one whose circuit
is open is skipped by the resilience rules (upstreams/resilience.py): the call then goes in the normal
order, and the mapping moves to the upstream that answered (`affinity_upstream_record`, after every
call that an upstream answered). Only a model with two upstreams of one priority (counting disabled
ones) has a choice to make; for any other the mapping is neither read nor written
(upstreams.routing.upstreams_route).

The mapping: `affinity:<SHA-256 of the model and the conversation key>` -> upstream id, so no caller
text is stored; it expires `seconds` after the last call that used it (the model's `sticky_seconds`).
It lives in the Django cache when that is Redis (REDIS_URL: shared by every process and machine), in
this process's bounded memory otherwise. While Redis cannot be reached (core.redis_health), failing
open it is kept in this process's memory meanwhile; failing closed the call is routed without it.
Stickiness never fails a call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.core.cache import cache, caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache

from core.redis_health import RedisUnavailable, redis_fail_open, redis_guarded

T = TypeVar("T")

AFFINITY_PREFIX = "affinity:"
# The mapping without Redis, or while it is down and failing open: one entry per conversation, the
# oldest culled beyond MAX_ENTRIES.
_local: BaseCache = LocMemCache("igw-affinity", {"OPTIONS": {"MAX_ENTRIES": 100_000}})


@dataclass(frozen=True, slots=True)
class Affinity:
    """A call's conversation on one model: the mapping's key (a digest) and how long it lasts."""

    key: str
    seconds: int


def affinity_make(
    *, model_label: str, model_pk: int, conversation_key: str | None, seconds: int
) -> Affinity | None:
    """The affinity of a call naming the conversation `conversation_key` on the model `model_label`
    with primary key `model_pk`; None (no stickiness) without a key or when `seconds` is 0."""
    if not conversation_key or seconds <= 0:
        return None
    material = f"{model_label.lower()}:{model_pk}\n{conversation_key}".encode("utf-8", "surrogatepass")
    return Affinity(key=f"{AFFINITY_PREFIX}{hashlib.sha256(material).hexdigest()}", seconds=seconds)


def affinity_upstream_get(*, affinity: Affinity) -> int | None:
    """The id of the upstream that last answered the conversation, or None (none yet, expired, or
    the mapping out of reach)."""
    value = _stored(lambda store: store.get(affinity.key))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def affinity_upstream_record(*, affinity: Affinity, upstream_id: int) -> None:
    """The upstream `upstream_id` answered the conversation: its next calls go there first, for
    `affinity.seconds` from now (each call renews it)."""
    _stored(lambda store: store.set(affinity.key, upstream_id, timeout=affinity.seconds))


def _stored(operation: Callable[[BaseCache], T]) -> T | None:
    """`operation` on Redis when the cache is Redis, else on this process's memory. While Redis
    cannot be reached: on this process's memory when failing open, not at all (None) when failing
    closed, so that the call is routed as if it named no conversation."""
    if not isinstance(caches["default"], RedisCache):
        return operation(_local)
    try:
        return redis_guarded(lambda: operation(cache))
    except RedisUnavailable:
        if not redis_fail_open():
            return None
        return operation(_local)
