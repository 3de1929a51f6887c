"""Calendar windows of subscription caps, in GATEWAY_TIMEZONE.

A day starts at 00:00, a week on Monday at 00:00, a month on the 1st at 00:00, all local time; the
total window starts at a fixed date and never ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings

# The total window's start: one fixed row per subscription, never reset.
TOTAL_WINDOW_START = date(1970, 1, 1)
# The one order in which reservations and releases touch a subscription's counters (no deadlocks).
WINDOW_ORDER = ("day", "week", "month", "total")


@dataclass(frozen=True)
class WindowStarts:
    day: date
    week: date
    month: date


def window_zone() -> ZoneInfo:
    return ZoneInfo(settings.GATEWAY_TIMEZONE)


def window_starts_at(*, moment: datetime) -> WindowStarts:
    """The local start dates of the day, week and month containing `moment` (an aware datetime)."""
    local = moment.astimezone(window_zone()).date()
    return WindowStarts(day=local, week=local - timedelta(days=local.weekday()), month=local.replace(day=1))


def local_midnight(day: date) -> datetime:
    """When the local day `day` starts (aware); zoneinfo resolves the UTC offset on that date (DST
    included)."""
    return datetime.combine(day, time.min, tzinfo=window_zone())


def window_end(*, window: str, start: date) -> datetime | None:
    """When the window that started on `start` ends (aware); None for the total window."""
    if window == "day":
        end = start + timedelta(days=1)
    elif window == "week":
        end = start + timedelta(days=7)
    elif window == "month":
        end = (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    elif window == "total":
        return None
    else:
        raise ValueError(f"unknown window {window!r}")
    return local_midnight(end)


# An API key's budget period (keys.ApiKey.BudgetPeriod) and the calendar window it is counted in.
PERIOD_WINDOWS = {"daily": "day", "weekly": "week", "monthly": "month", "total": "total"}


def window_start_for(*, window: str, moment: datetime) -> date:
    """The local start date of the window `window` ("day", "week", "month", "total") containing
    `moment`."""
    if window == "total":
        return TOTAL_WINDOW_START
    return getattr(window_starts_at(moment=moment), window)  # type: ignore[no-any-return]
