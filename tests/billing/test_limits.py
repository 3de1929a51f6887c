"""Concurrency slots (billing/limits.py): a slot is given back only by the call that holds it, on Redis
and on this process's own slots (no Redis, or Redis down and failing open)."""

from __future__ import annotations

import time
import uuid
from contextlib import ExitStack

import pytest
import redis
from django.core.cache import cache
from django.test import override_settings

from billing.errors import ConcurrencyLimitExceeded
from billing.limits import (
    concurrency_slot_acquire,
    concurrency_slot_release,
    concurrency_slots_release_owner,
)
from core.process_identity import process_owner
from tests.process_state import redis_health_fresh
from tests.redis_process import redis_process

LOCMEM = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "igw-test"}}


@pytest.fixture
def limit_key() -> str:
    return f"api_key:slots-{uuid.uuid4().hex}"


@pytest.fixture
def own_redis(monkeypatch):
    with redis_process() as server, override_settings(REDIS_URL=server.url, CACHES=server.caches()):
        redis_health_fresh(monkeypatch)  # reachable, whatever the previous Redis did
        yield server


def take_after_expiry(limit_key: str):
    """The first call's one-second lease expires; a second call takes the same (only) slot."""
    first = concurrency_slot_acquire(limit_key=limit_key, limit=1, ttl_seconds=1)
    time.sleep(1.1)
    second = concurrency_slot_acquire(limit_key=limit_key, limit=1, ttl_seconds=60)
    assert (first.key, first.local) == (second.key, second.local)
    return first, second


@pytest.mark.parametrize("where", ["redis", "this_process", "this_process_while_redis_is_down"])
def test_a_late_release_does_not_free_the_slot_another_call_took(where, request, limit_key):
    """The first call's release comes after its lease expired and a second call took the slot: the
    slot stays the second call's until that call gives it back."""
    with ExitStack() as stack:
        if where == "this_process":
            stack.enter_context(override_settings(REDIS_URL="", CACHES=LOCMEM))
        else:
            server = request.getfixturevalue("own_redis")
            if where == "this_process_while_redis_is_down":
                server.stop()
        first, second = take_after_expiry(limit_key)
        assert first.local is (where != "redis")

        concurrency_slot_release(slot=first)

        if where == "redis":
            assert redis.Redis.from_url(server.url).get(second.key) == second.token.encode()
        with pytest.raises(ConcurrencyLimitExceeded):
            concurrency_slot_acquire(limit_key=limit_key, limit=1)
        concurrency_slot_release(slot=second)
        if where == "redis":
            assert redis.Redis.from_url(server.url).get(second.key) is None
        assert concurrency_slot_acquire(limit_key=limit_key, limit=1) is not None


def test_a_dead_processes_slots_are_given_back_and_no_other(own_redis, limit_key):
    mine = concurrency_slot_acquire(limit_key=limit_key, limit=2)
    direct = redis.Redis.from_url(own_redis.url)
    other = cache.make_key(f"igw:concurrency:{limit_key}:1")
    direct.set(other, "another-instance:1:abc", px=60_000)

    assert concurrency_slots_release_owner(owner=process_owner()) == 1

    assert direct.get(mine.key) is None
    assert direct.get(other) == b"another-instance:1:abc"
