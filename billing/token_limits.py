"""Tokens per minute of text calls (`tpm`): the group's, per credential, and an API key's own.

A call is admitted by its token ceiling: the most input it can send plus the most output it may be
given (what the text pipeline computes for its price ceiling). `token_window_take` adds the ceiling
to the current minute's window of each limit in one step, unless a window plus the ceiling would be
over its limit: then the call is refused (429 `rate_limit_exceeded`, `Retry-After` to the window's
end) and nothing is added. At capture `token_window_settle` gives back what the call did not use
(its ceiling minus the input and output its usage reported), so the window holds the actual tokens
and the next call finds the room; a failed call gives all of its ceiling back. So a burst of long
prompts is admitted only while the sum of their ceilings fits: no call is let in on a count read
before the others were added.

Windows are fixed one-minute windows that end on the minute, by the process's clock (as the rate
windows are). With REDIS_URL they are Redis keys, each expiring after its minute, and one Lua script
checks every limit of the call and adds to each, so processes never both see the same room. Without
REDIS_URL, or while Redis is down and GATEWAY_REDIS_FAILURE_MODE is "open", they are this process's
own counters; "closed" refuses the call with 503 `limits_unavailable` before anything is reserved.
Giving tokens back never raises: a window that cannot be corrected ends with its minute.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

from django.core.cache import cache

from billing.errors import RateLimitExceeded
from billing.limits import RATE_PERIOD_SECONDS, limits_redis_client, limits_unavailable
from core.redis_health import RedisUnavailable, redis_fail_open, redis_guarded

logger = logging.getLogger("gateway.billing")

TPM_KEY_PREFIX = "igw:tpm"

# KEYS: the call's windows; ARGV[1]: its ceiling, ARGV[2]: the windows' lifetime in ms, ARGV[2 + i]:
# KEYS[i]'s limit. Returns 0 when the ceiling was added to every window, else the index of the first
# window it does not fit in (and adds to none): the check and the additions are one step.
_TAKE_SCRIPT = """
local tokens = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
    local used = tonumber(redis.call('GET', key) or '0')
    if used + tokens > tonumber(ARGV[2 + i]) then
        return i
    end
end
for _, key in ipairs(KEYS) do
    redis.call('INCRBY', key, tokens)
    redis.call('PEXPIRE', key, ARGV[2])
end
return 0
"""

# KEYS: the windows a call was added to; ARGV[1]: the tokens it gives back. A window that has
# expired (its minute is over) is left alone rather than made again with a negative count.
_GIVE_BACK_SCRIPT = """
for _, key in ipairs(KEYS) do
    if redis.call('EXISTS', key) == 1 then
        if redis.call('DECRBY', key, ARGV[1]) < 0 then
            redis.call('SET', key, 0, 'KEEPTTL')
        end
    end
end
return 0
"""


@dataclass(frozen=True)
class _TokenLimit:
    counter: str  # names the window's key
    tpm: int
    whose: str  # how a refusal names the limit


@dataclass(frozen=True)
class TokenWindowTake:
    """A call's ceiling, added to the windows named in `keys` (`local`: this process's counters)."""

    keys: tuple[str, ...]
    tokens: int
    local: bool


class _LocalWindows:
    """This process's windows (without Redis, or while it is down and failing open): key -> (tokens,
    end on time.time()). One lock makes the check and the additions one step, as the script does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[int, float]] = {}

    def take(self, keys: list[str], limits: list[int], tokens: int, ends_at: float, *, count: bool) -> int:
        now = time.time()
        with self._lock:
            if len(self._windows) > 10_000:
                self._windows = {key: held for key, held in self._windows.items() if held[1] > now}
            used = [self._used(key, now) for key in keys]
            refused_at = _first_full(used=used, limits=limits, tokens=tokens)
            if count and not refused_at:
                for key, held in zip(keys, used, strict=True):
                    self._windows[key] = (held + tokens, ends_at)
            return refused_at

    def give_back(self, keys: tuple[str, ...], tokens: int) -> None:
        now = time.time()
        with self._lock:
            for key in keys:
                held = self._windows.get(key)
                if held is not None and held[1] > now:
                    self._windows[key] = (max(0, held[0] - tokens), held[1])

    def _used(self, key: str, now: float) -> int:
        held = self._windows.get(key)
        return held[0] if held is not None and held[1] > now else 0


_local_windows = _LocalWindows()


def _first_full(*, used: list[int], limits: list[int], tokens: int) -> int:
    """The index (from 1) of the first window that has no room for `tokens`, else 0 (as the script)."""
    for index, (held, limit) in enumerate(zip(used, limits, strict=True), start=1):
        if held + tokens > limit:
            return index
    return 0


def _limits_of(
    *, limit_key: str, group_tpm: int, api_key_id: int | None, key_tpm: int | None
) -> list[_TokenLimit]:
    limits = []
    if group_tpm > 0:
        limits.append(_TokenLimit(f"credential:{limit_key}", group_tpm, "the group allows this key"))
    if api_key_id is not None and key_tpm is not None and key_tpm > 0:
        limits.append(_TokenLimit(f"key:{api_key_id}", key_tpm, "this API key's own limit allows"))
    return limits


def _refused(*, limit: _TokenLimit, tokens: int, seconds_left: int) -> RateLimitExceeded:
    if tokens > limit.tpm:
        return RateLimitExceeded(
            f"This call may use up to {tokens} tokens (its input and its output limit), and "
            f"{limit.whose} {limit.tpm} tokens per minute in all: set a lower output limit "
            "(max_tokens or your API's equivalent) or send less input.",
            retry_after=seconds_left,
        )
    return RateLimitExceeded(
        f"Token rate limit reached: {limit.whose} {limit.tpm} tokens (input + output) per minute, "
        f"and this call may use up to {tokens}. Retry after the Retry-After header's seconds.",
        retry_after=seconds_left,
    )


def token_window_take(
    *,
    limit_key: str,
    group_tpm: int,
    api_key_id: int | None,
    key_tpm: int | None,
    tokens: int,
    now: float | None = None,
    count: bool = True,
) -> TokenWindowTake | None:
    """Admit a text call of at most `tokens` (input + output) against the group's `tpm` (per
    credential `limit_key`; 0 = unlimited) and the API key's own (None = none): add them to the
    current minute of each, or raise 429 `rate_limit_exceeded` with Retry-After and add to none.
    None when no limit applies (nothing to settle). `count=False` adds nothing, returns None, and
    refuses when a window already has no room for `tokens`: a pre-check, for calls with expensive
    work before the take that counts them."""
    limits = _limits_of(limit_key=limit_key, group_tpm=group_tpm, api_key_id=api_key_id, key_tpm=key_tpm)
    if not limits:
        return None
    tokens = max(0, tokens)
    clock = time.time() if now is None else now
    window_start = int(clock) - int(clock) % RATE_PERIOD_SECONDS
    window_end = window_start + RATE_PERIOD_SECONDS
    seconds_left = max(1, math.ceil(window_end - clock))
    names = [f"{TPM_KEY_PREFIX}:{limit.counter}:{window_start}" for limit in limits]
    tpms = [limit.tpm for limit in limits]

    client = limits_redis_client()
    refused_at: int
    local = True
    if client is None:
        refused_at = _local_windows.take(names, tpms, tokens, window_end, count=count)
    else:
        keys = [cache.make_key(name) for name in names]
        # Kept a second past the minute: a correction at its very end still finds the window.
        lifetime_ms = (seconds_left + 1) * 1000

        def take() -> int:
            if not count:
                used = [int(held or 0) for held in client.mget(keys)]
                return _first_full(used=used, limits=tpms, tokens=tokens)
            script = client.register_script(_TAKE_SCRIPT)
            return int(script(keys=keys, args=[tokens, lifetime_ms, *tpms]))

        try:
            refused_at, local = redis_guarded(take), False
        except RedisUnavailable:
            if not redis_fail_open():
                raise limits_unavailable() from None
            refused_at = _local_windows.take(names, tpms, tokens, window_end, count=count)
        else:
            names = keys
    if refused_at:
        raise _refused(limit=limits[refused_at - 1], tokens=tokens, seconds_left=seconds_left)
    if not count:
        return None
    return TokenWindowTake(keys=tuple(names), tokens=tokens, local=local)


def token_window_settle(*, take: TokenWindowTake | None, used: int | None) -> None:
    """Correct the windows to what the call used: give back its ceiling minus `used` (input +
    output, as its usage reported them; None: no usage was reported, and the whole ceiling stays
    counted, as the whole hold is charged). Never raises."""
    if take is None or used is None:
        return
    unused = take.tokens - max(0, used)
    if unused <= 0:
        return
    if take.local:
        _local_windows.give_back(take.keys, unused)
        return
    client = limits_redis_client()
    if client is None:  # the cache stopped being Redis since (a settings change)
        return
    try:
        redis_guarded(lambda: client.register_script(_GIVE_BACK_SCRIPT)(keys=list(take.keys), args=[unused]))
    except RedisUnavailable:
        logger.warning("tokens per minute not given back (Redis unreachable); the window ends by itself")
    except Exception:
        logger.exception("tokens per minute not given back; the window ends by itself")


def token_window_give_back(*, take: TokenWindowTake | None) -> None:
    """A call that failed used nothing: its whole ceiling leaves the windows. Never raises."""
    token_window_settle(take=take, used=0)
