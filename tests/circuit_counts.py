"""The circuit breaker's shared per-minute counters, as tests read them."""

from __future__ import annotations

from django.core.cache import cache


def counted(upstream_id: int, minutes: range) -> tuple[int, int]:
    """(calls, errors) in the shared per-minute counters."""
    return (
        sum(cache.get(f"circuit:{upstream_id}:calls:{minute}") or 0 for minute in minutes),
        sum(cache.get(f"circuit:{upstream_id}:errors:{minute}") or 0 for minute in minutes),
    )
