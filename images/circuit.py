"""A circuit breaker per upstream, its state in the Django cache (Redis when REDIS_URL is set, so every
process shares it; per process otherwise).

Closed: calls go through; each failure counts, a success resets the count. After `threshold`
consecutive failures the circuit opens for `cooldown` seconds: the upstream is skipped without a
network call. When the cooldown ends, exactly one caller wins the probe (an atomic cache `add`); its
success closes the circuit, its failure opens it for another cooldown.

Per-minute call and error counters feed the admin's "recent error rate".
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.core.cache import cache

DEFAULT_THRESHOLD = 5
DEFAULT_COOLDOWN_SECONDS = 30
STATS_WINDOW_MINUTES = 5


def _key(upstream_id: int, name: str) -> str:
    return f"circuit:{upstream_id}:{name}"


@dataclass(frozen=True)
class CircuitState:
    state: str  # "closed", "open" or "half-open"
    consecutive_failures: int
    open_until: float | None
    recent_calls: int
    recent_errors: int

    @property
    def recent_error_rate(self) -> float | None:
        return self.recent_errors / self.recent_calls if self.recent_calls else None


def circuit_allows(
    *, upstream_id: int, cooldown: float = DEFAULT_COOLDOWN_SECONDS, now: float | None = None
) -> bool:
    """May a call go to this upstream now? Takes the single probe slot when the cooldown has ended."""
    open_until = cache.get(_key(upstream_id, "open_until"))
    if open_until is None:
        return True
    moment = time.time() if now is None else now
    if moment < open_until:
        return False
    # Half-open: one probe at a time, across every process sharing the cache.
    return bool(cache.add(_key(upstream_id, "probe"), 1, timeout=max(1, int(cooldown))))


def circuit_record_success(*, upstream_id: int) -> None:
    cache.delete_many(
        [_key(upstream_id, "failures"), _key(upstream_id, "open_until"), _key(upstream_id, "probe")]
    )
    _count(upstream_id, error=False)


def circuit_record_failure(
    *,
    upstream_id: int,
    threshold: int = DEFAULT_THRESHOLD,
    cooldown: float = DEFAULT_COOLDOWN_SECONDS,
    now: float | None = None,
) -> bool:
    """Count a failure; open the circuit at the threshold (or re-open it after a failed probe).
    Returns True when the circuit is open after this failure."""
    _count(upstream_id, error=True)
    failures_key = _key(upstream_id, "failures")
    cache.add(failures_key, 0, timeout=None)
    try:
        failures = cache.incr(failures_key)
    except ValueError:  # evicted between add and incr
        cache.set(failures_key, 1, timeout=None)
        failures = 1
    probing = cache.get(_key(upstream_id, "probe")) is not None
    if failures >= threshold or probing:
        moment = time.time() if now is None else now
        cache.set(_key(upstream_id, "open_until"), moment + cooldown, timeout=int(cooldown) + 3600)
        cache.delete(_key(upstream_id, "probe"))
        return True
    return False


def circuit_state(*, upstream_id: int, now: float | None = None) -> CircuitState:
    moment = time.time() if now is None else now
    open_until = cache.get(_key(upstream_id, "open_until"))
    if open_until is None:
        state = "closed"
    elif moment < open_until:
        state = "open"
    else:
        state = "half-open"
    minutes = [int(moment // 60) - i for i in range(STATS_WINDOW_MINUTES)]
    counters = cache.get_many(
        [_key(upstream_id, f"calls:{m}") for m in minutes]
        + [_key(upstream_id, f"errors:{m}") for m in minutes]
    )
    calls = sum(v for k, v in counters.items() if ":calls:" in k)
    errors = sum(v for k, v in counters.items() if ":errors:" in k)
    return CircuitState(
        state=state,
        consecutive_failures=int(cache.get(_key(upstream_id, "failures")) or 0),
        open_until=open_until,
        recent_calls=calls,
        recent_errors=errors,
    )


def circuit_reset(*, upstream_id: int) -> None:
    """Close the circuit by hand (admin action)."""
    cache.delete_many(
        [_key(upstream_id, "failures"), _key(upstream_id, "open_until"), _key(upstream_id, "probe")]
    )


def _count(upstream_id: int, *, error: bool) -> None:
    minute = int(time.time() // 60)
    names = ["calls", "errors"] if error else ["calls"]
    for name in names:
        key = _key(upstream_id, f"{name}:{minute}")
        cache.add(key, 0, timeout=(STATS_WINDOW_MINUTES + 1) * 60)
        try:
            cache.incr(key)
        except ValueError:
            cache.set(key, 1, timeout=(STATS_WINDOW_MINUTES + 1) * 60)
