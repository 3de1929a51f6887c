"""This process's own views of shared state, set to what a test starts from. Set through pytest's
`monkeypatch`, so whatever a test changes is put back when it ends."""

from __future__ import annotations

import pytest
from django.core.cache.backends.locmem import LocMemCache

from billing import limits, token_limits
from core import redis_health
from upstreams import affinity


def redis_health_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis counts as reachable: no failure recorded, no outage under way. A test that switches the
    cache to a Redis of its own calls it after the switch, so that a failure of the previous server
    does not send its calls to the per-process fallbacks for GATEWAY_REDIS_RETRY_SECONDS."""
    monkeypatch.setattr(redis_health, "_failed_at", None)
    monkeypatch.setattr(redis_health, "_degraded_since", None)


def limits_local_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """New per-process rate counters, concurrency slots and token windows (used without Redis or
    while it is down)."""
    monkeypatch.setattr(limits, "_local", LocMemCache("igw-limits-test", {}))
    monkeypatch.setattr(limits, "_local_slots", limits._LocalSlots())
    monkeypatch.setattr(token_limits, "_local_windows", token_limits._LocalWindows())


def affinity_local_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new per-process memory of sticky routing (used without Redis or while it is down)."""
    fresh = LocMemCache("igw-affinity-test", {})
    fresh.clear()  # caches of one name share their entries
    monkeypatch.setattr(affinity, "_local", fresh)
