"""A circuit breaker per upstream, its state in the Django cache (Redis when REDIS_URL is set, so every
process shares it; per process otherwise).

Closed: calls go through; each failure counts, a success resets the count. After `threshold`
consecutive failures the circuit opens for `cooldown` seconds: the upstream is skipped without a
network call. When the cooldown ends, exactly one caller wins the probe (an atomic cache `add`); its
success closes the circuit, its failure opens it for another cooldown.

Round trips: `circuit_admit` reads the circuit with one MGET (the end of the cooldown and the failure
count) and returns an `Admission`. When that read finds the circuit closed with no failure counted,
the process remembers it (a clean view) and admits the upstream's next calls without asking Redis
again, for as long as Redis reports no change of the upstream's circuit: the process's configuration
watch (core.config_watch.key_changes_watch) hears of every write to a `circuit:` key the moment it is
made, whichever process makes it, and a failure counted or a circuit opened elsewhere ends the view
before this process's next admission. When the watch cannot vouch for that (no Redis, a server
without CLIENT TRACKING, a connection not proven recently), a view lasts CLEAN_VIEW_SECONDS, so a
circuit opened by another process is seen here within that (a few more calls may go to the failing
upstream meanwhile, and fail over as usual). A failure, a reset or a configuration change made in
this process ends the view at once. Opening, the cooldown and the single half-open probe are decided
in Redis, shared by every process. A success writes nothing when its admission found the circuit
closed with no failure counted, which is the steady state: no round trip per call at all. Otherwise
(failures counted, or the call is the half-open probe) the success resets the circuit with one
DELETE. A success thus resets what its admission saw: a failure counted by another call while this
one was in flight is reset by the next success admitted after it.

The per-minute call and error counts behind the admin's "recent error rate" are counted per process
and added to the shared counters at most every STATS_FLUSH_SECONDS (and at once before this process
shows them, `circuit_state`). A call counted inside a request never writes them on its way: the
write (two Redis round trips a counter) would come before its answer, before a stream's first event.
The first request to finish once they are due writes them, after its answer (core.request_scope);
outside a request the count that finds them due writes them. The admin's figure therefore leaves
out up to the last STATS_FLUSH_SECONDS of each other process's calls (longer while every request of
a process is a stream still open), and the last calls of a process that has received none since.

When every upstream of a model is open, a call would be refused without any attempt until a cooldown
ends; one bad prompt (or a provider's short hiccup) would then shut out everyone. So each process may
still send one call per upstream per cooldown through an open circuit (`circuit_admit_panic`, asked by
upstreams.resilience only when nothing else is admissible): Envoy's panic threshold, LiteLLM's "never
cool down the only deployment". Its success closes the circuit, its failure opens it again.

The shared state lives in Redis; when Redis cannot be reached the circuit never raises: it keeps its
state in this process's memory (core.redis_health: one warning per outage), asks Redis again after
GATEWAY_REDIS_RETRY_SECONDS, and goes back to it once it answers (what was counted meanwhile stays local).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

from django.core.cache import cache
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.locmem import LocMemCache
from django.core.signals import request_finished

from core.config_watch import key_changes_receive, key_changes_reported
from core.redis_health import RedisUnavailable, redis_guarded
from core.request_scope import in_request

logger = logging.getLogger("gateway.upstream")

DEFAULT_THRESHOLD = 5
DEFAULT_COOLDOWN_SECONDS = 30
STATS_WINDOW_MINUTES = 5
STATS_FLUSH_SECONDS = 5.0
CLEAN_VIEW_SECONDS = 0.25
T = TypeVar("T")

# upstream id -> (time.monotonic() before the last read that found its circuit closed with no
# failure, the view's token then).
_clean_views: dict[int, tuple[float, tuple[int, int]]] = {}
# Reported changes (circuit_key_changed): of every circuit, and per upstream. A view holds only while
# neither has moved since its read.
_changes_all = 0
_changes: dict[int, int] = {}
# The circuit's state: a change of any of its keys ends a clean view (the per-minute counters do not).
STATE_NAMES = ("failures", "open_until", "probe")
# upstream id -> time.monotonic() of this process's last call let through its open circuit.
_panic_probes: dict[int, float] = {}
_panic_lock = threading.Lock()
# Where the circuits live while Redis cannot be reached.
_fallback: BaseCache = LocMemCache("circuit-fallback", {"TIMEOUT": None, "OPTIONS": {"MAX_ENTRIES": 10000}})


def _stored(operation: Callable[[BaseCache], T]) -> T:
    """Run `operation` on the shared cache, or on this process's memory while Redis cannot be
    reached (core.redis_health: one warning per outage, Redis tried again after
    GATEWAY_REDIS_RETRY_SECONDS): the circuit breaker must never fail a call."""
    try:
        return redis_guarded(lambda: operation(cache))
    except RedisUnavailable:
        return operation(_fallback)


CIRCUIT_PREFIX = "circuit:"


def _key(upstream_id: int, name: str) -> str:
    return f"{CIRCUIT_PREFIX}{upstream_id}:{name}"


def _state_keys(upstream_id: int) -> list[str]:
    return [_key(upstream_id, name) for name in STATE_NAMES]


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


@dataclass(frozen=True)
class Admission:
    """A call `circuit_admit` let through; pass it to `circuit_record_success`.

    clean: the circuit was closed with no failure counted, so a success has nothing to reset.
    probe: the call goes through a circuit that is open or half-open; its outcome decides it."""

    upstream_id: int
    clean: bool
    probe: bool = False


def circuit_admit(
    *, upstream_id: int, cooldown: float = DEFAULT_COOLDOWN_SECONDS, now: float | None = None
) -> Admission | None:
    """Let a call go to this upstream now (an Admission), or None while its circuit is open. Takes the
    single probe slot when the cooldown has ended."""
    seen_clean = _clean_views.get(upstream_id)
    if seen_clean is not None and _view_holds(upstream_id, *seen_clean):
        return Admission(upstream_id=upstream_id, clean=True)
    open_key, failures_key = _key(upstream_id, "open_until"), _key(upstream_id, "failures")
    key_changes_receive()
    read_at, token = time.monotonic(), _view_token(upstream_id)
    # One round trip (MGET) decides the common case.
    values = _stored(lambda store: store.get_many([open_key, failures_key]))
    open_until = values.get(open_key)
    if open_until is None:
        clean = not values.get(failures_key)
        if clean:
            _clean_views[upstream_id] = (read_at, token)
        else:
            _clean_views.pop(upstream_id, None)
        return Admission(upstream_id=upstream_id, clean=clean)
    _clean_views.pop(upstream_id, None)
    moment = time.time() if now is None else now
    if moment < open_until:
        return None
    # Half-open: one probe at a time, across every process sharing the cache.
    probe_key = _key(upstream_id, "probe")
    if _stored(lambda store: store.add(probe_key, 1, timeout=max(1, int(cooldown)))):
        return Admission(upstream_id=upstream_id, clean=False, probe=True)
    return None


def _view_token(upstream_id: int) -> tuple[int, int]:
    return _changes_all, _changes.get(upstream_id, 0)


def _view_holds(upstream_id: int, read_at: float, token: tuple[int, int]) -> bool:
    """A clean view still holds: no change of the circuit reported since its read (asked first, so
    that what has arrived is handed on), and the watch vouches for the time since, or it is recent."""
    reported = key_changes_reported(read_at)
    if _view_token(upstream_id) != token:
        return False
    return reported or time.monotonic() - read_at < CLEAN_VIEW_SECONDS


def circuit_key_changed(rest: str | None) -> None:
    """The configuration watch's report of a changed `circuit:` key (`rest`: what follows the prefix,
    "<upstream id>:<name>"), or None when anything may have changed: ends the clean views it concerns."""
    global _changes_all
    upstream, _, name = (rest or "").partition(":")
    if rest is not None and name.split(":", 1)[0] not in STATE_NAMES:
        return  # a per-minute counter
    if rest is None or not upstream.isdigit():
        _changes_all += 1
        return
    _changes[int(upstream)] = _changes.get(int(upstream), 0) + 1


def circuit_admit_panic(*, upstream_id: int, cooldown: float = DEFAULT_COOLDOWN_SECONDS) -> Admission | None:
    """Let one call of this process through the upstream's open circuit per `cooldown`, for when every
    upstream of a model is open (module docstring); None when this process has sent one already."""
    now = time.monotonic()
    with _panic_lock:
        last = _panic_probes.get(upstream_id)
        if last is not None and now - last < cooldown:
            return None
        _panic_probes[upstream_id] = now
    return Admission(upstream_id=upstream_id, clean=False, probe=True)


def circuit_open_until(*, upstream_id: int) -> float | None:
    """When the upstream's open circuit lets a call through again (time.time()), or None if closed."""
    key = _key(upstream_id, "open_until")
    open_until: float | None = _stored(lambda store: store.get(key))
    return open_until


def circuit_record_success(*, upstream_id: int, admission: Admission | None = None) -> None:
    """A call succeeded: reset the failure count and close the circuit. With the call's `admission`
    this writes nothing when the admission found nothing to reset."""
    if admission is not None and admission.upstream_id != upstream_id:
        raise ValueError(f"admission of upstream {admission.upstream_id} used for upstream {upstream_id}")
    _stats.count(upstream_id, error=False)
    if admission is not None and admission.clean:
        return
    _clean_views.pop(upstream_id, None)
    keys = _state_keys(upstream_id)
    _stored(lambda store: store.delete_many(keys))


def circuit_record_failure(
    *,
    upstream_id: int,
    threshold: int = DEFAULT_THRESHOLD,
    cooldown: float = DEFAULT_COOLDOWN_SECONDS,
    now: float | None = None,
) -> bool:
    """Count a failure; open the circuit at the threshold (or re-open it after a failed probe).
    Returns True when the circuit is open after this failure."""
    _clean_views.pop(upstream_id, None)
    _stats.count(upstream_id, error=True)
    failures_key = _key(upstream_id, "failures")
    moment = time.time() if now is None else now

    def record(store: BaseCache) -> bool:
        store.add(failures_key, 0, timeout=None)
        try:
            failures = store.incr(failures_key)
        except ValueError:  # evicted between add and incr
            store.set(failures_key, 1, timeout=None)
            failures = 1
        probing = store.get(_key(upstream_id, "probe")) is not None
        if failures >= threshold or probing:
            store.set(_key(upstream_id, "open_until"), moment + cooldown, timeout=int(cooldown) + 3600)
            store.delete(_key(upstream_id, "probe"))
            return True
        return False

    return _stored(record)


def circuit_state(*, upstream_id: int, now: float | None = None) -> CircuitState:
    """The circuit and the last STATS_WINDOW_MINUTES of calls, as every process has reported them
    (this process's own counts included up to now)."""
    circuit_stats_flush()
    moment = time.time() if now is None else now
    open_until = circuit_open_until(upstream_id=upstream_id)
    if open_until is None:
        state = "closed"
    elif moment < open_until:
        state = "open"
    else:
        state = "half-open"
    minutes = [int(moment // 60) - i for i in range(STATS_WINDOW_MINUTES)]
    counters = _stored(
        lambda store: store.get_many(
            [_key(upstream_id, f"calls:{m}") for m in minutes]
            + [_key(upstream_id, f"errors:{m}") for m in minutes]
        )
    )
    calls = sum(v for k, v in counters.items() if ":calls:" in k)
    errors = sum(v for k, v in counters.items() if ":errors:" in k)
    return CircuitState(
        state=state,
        consecutive_failures=int(_stored(lambda store: store.get(_key(upstream_id, "failures"))) or 0),
        open_until=open_until,
        recent_calls=calls,
        recent_errors=errors,
    )


def circuit_states(*, upstream_ids: Collection[int], now: float | None = None) -> dict[int, str]:
    """Each upstream's circuit, "closed", "open" or "half-open" (as `circuit_state` says it), read
    with one MGET for them all: the metrics scrape reads every upstream's."""
    keys = {upstream_id: _key(upstream_id, "open_until") for upstream_id in upstream_ids}
    values = _stored(lambda store: store.get_many(list(keys.values()))) if keys else {}
    moment = time.time() if now is None else now
    states = {}
    for upstream_id, key in keys.items():
        open_until = values.get(key)
        states[upstream_id] = (
            "closed" if open_until is None else "open" if moment < open_until else "half-open"
        )
    return states


def circuit_reset(*, upstream_id: int) -> None:
    """Close the circuit by hand (admin action)."""
    _clean_views.pop(upstream_id, None)
    _panic_probes.pop(upstream_id, None)
    keys = _state_keys(upstream_id)
    _stored(lambda store: store.delete_many(keys))


def circuit_views_clear() -> None:
    """Forget what this process alone knows of the circuits (its clean views, panic probes, and what it
    kept in memory during a shared-cache outage): the next admission of every upstream reads Redis."""
    _clean_views.clear()
    with _panic_lock:
        _panic_probes.clear()
    _fallback.clear()


def circuit_stats_flush() -> None:
    """Add this process's pending call and error counts to the shared per-minute counters now."""
    _stats.flush()


class _StatsBuffer:
    """This process's call and error counts per (upstream, counter, minute) not yet in the cache."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Counter[tuple[int, str, int]] = Counter()
        self._flushed_at = time.monotonic()

    def count(self, upstream_id: int, *, error: bool) -> None:
        """Count a call; outside a request, write the counts if due."""
        minute = int(time.time() // 60)
        with self._lock:
            self._pending[(upstream_id, "calls", minute)] += 1
            if error:
                self._pending[(upstream_id, "errors", minute)] += 1
        if not in_request():
            self.flush_if_due()

    def flush_if_due(self) -> None:
        """Write the counts when the last write is STATS_FLUSH_SECONDS old."""
        with self._lock:
            if not self._pending or time.monotonic() - self._flushed_at < STATS_FLUSH_SECONDS:
                return
            taken = self._take()
        _stats_write(taken)

    def flush(self) -> None:
        with self._lock:
            taken = self._take()
        _stats_write(taken)

    def _take(self) -> Counter[tuple[int, str, int]]:
        taken, self._pending = self._pending, Counter()
        self._flushed_at = time.monotonic()
        return taken


def _stats_write(counts: Counter[tuple[int, str, int]]) -> None:
    """Add counts to the shared counters (two round trips a counter). They only feed the admin's
    figure: written to this process's memory while the shared cache is unreachable."""
    oldest = int(time.time() // 60) - STATS_WINDOW_MINUTES
    timeout = (STATS_WINDOW_MINUTES + 1) * 60

    def write(store: BaseCache) -> None:
        for (upstream_id, name, minute), delta in counts.items():
            if minute <= oldest:
                continue  # already outside every window the admin shows
            key = _key(upstream_id, f"{name}:{minute}")
            try:
                store.incr(key, delta)
            except ValueError:  # the minute's first count: create it, unless another process just did
                if not store.add(key, delta, timeout=timeout):
                    store.incr(key, delta)

    if counts:
        _stored(write)


_stats = _StatsBuffer()
atexit.register(circuit_stats_flush)


def _request_finished(**_: object) -> None:
    _stats.flush_if_due()  # what the request's calls left for after its answer


request_finished.connect(_request_finished, dispatch_uid="circuit_stats_request_finished")
