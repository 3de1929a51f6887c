"""Fixed windows in tests: django-ratelimit counts in fixed windows whose edges it staggers per key, so
a test that counts several calls against one key must not straddle an edge."""

from __future__ import annotations

import time
from collections.abc import Callable

from django_ratelimit.core import get_usage

from billing.limits import RATE_GROUP, RATE_PERIOD_SECONDS, local_rate_window_end, ratelimit_seconds_left


def _time_left(*, group: str, key: str, period: int) -> int:
    usage = get_usage(None, group=group, key=lambda _g, _r: key, rate=(1, period))
    return usage["time_left"]


def window_key_fresh(*, group: str, period: int, candidate: Callable[[], str], seconds: int = 20) -> str:
    """A key from `candidate()` whose current window in `group` has at least `seconds` left."""
    while True:
        key = candidate()
        if _time_left(group=group, key=key, period=period) >= seconds:
            return key


def window_key_ending(*, candidate: Callable[[], str], time_left: int) -> str:
    """A key from `candidate()` whose current per-minute rate window has django-ratelimit's
    `time_left` (its last second minus the whole seconds now) equal to `time_left`."""
    while True:
        key = candidate()
        if _time_left(group=RATE_GROUP, key=key, period=RATE_PERIOD_SECONDS) == time_left:
            return key


def rate_window_wait(limit_key: str, *, seconds: float = 5, group: str = RATE_GROUP) -> None:
    """Return once the credential's current per-minute rate window (in the counter `group`: the
    group's rpm by default) has at least `seconds` left (waiting into the next window when it has
    not), so a test's calls cannot straddle two windows. The clock is read after the window: a second
    that ticks in between makes the end look later, never earlier (which could wake this up in the
    window's last second)."""
    time_left = _time_left(group=group, key=limit_key, period=RATE_PERIOD_SECONDS)
    now = time.time()
    window_end = int(now) + ratelimit_seconds_left(time_left=time_left)
    if window_end - now < seconds:
        time.sleep(window_end - now + 0.1)


def local_rate_window_wait(*, seconds: float = 5) -> None:
    """The same while Redis is down, for the per-process counters (their windows are not staggered)."""
    now = time.time()
    time_left = local_rate_window_end(now=int(now)) - now
    if time_left < seconds:
        time.sleep(time_left + 0.1)


def token_window_wait(*, seconds: float = 15) -> None:
    """Return once the current tokens-per-minute window (fixed minutes, billing/token_limits.py) has
    at least `seconds` left, waiting into the next minute when it has not."""
    local_rate_window_wait(seconds=seconds)
