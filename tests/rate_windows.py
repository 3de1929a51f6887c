"""Per-minute rate limits in tests: django-ratelimit counts in fixed one-minute windows."""

from __future__ import annotations

import time

from django_ratelimit.core import get_usage

from billing.limits import RATE_GROUP, RATE_PERIOD_SECONDS


def rate_window_wait(limit_key: str, *, seconds: float = 5) -> None:
    """Return once the credential's current per-minute rate window has at least `seconds` left (waiting
    into the next window when it has not), so a test's calls cannot straddle two windows: the
    windows are fixed, and django-ratelimit staggers their edges per key."""
    usage = get_usage(None, group=RATE_GROUP, key=lambda _g, _r: limit_key, rate=(1, RATE_PERIOD_SECONDS))
    if usage["time_left"] < seconds:
        time.sleep(usage["time_left"] + 0.1)
