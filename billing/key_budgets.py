"""API key budgets: the most one key may spend per calendar window, counted on the holds.

A call on a key with a budget counts its price (a text call's ceiling) in the key's current window
(KeyBudgetUsage) in the same transaction as its wallet or subscription hold, with the conditional
`used + amount <= budget`; the hold names the key and the window. A capture for less gives the
difference back to that window, a release or an expiry gives all of it back, and only the caller
that won the hold's status transition does. A window is therefore never overspent, whatever the
concurrency. billing/holds.py and billing/subscriptions.py run these steps; this module holds what
they share: which window a call counts in, the ORM form of counting and giving back, and the
refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db.models import F
from django.utils import timezone

from billing.errors import UsageLimitExceeded
from billing.models import Hold, KeyBudgetUsage
from billing.money import money_display, money_sql
from billing.windows import PERIOD_WINDOWS, window_end, window_start_for


@dataclass(frozen=True)
class KeyBudget:
    """The budget of the API key a call is made with: at most `budget` per `period` (daily, weekly,
    monthly, total), calendar windows in GATEWAY_TIMEZONE."""

    api_key_id: int
    budget: Decimal
    period: str

    @property
    def window(self) -> str:
        """The calendar window of the period: day, week, month or total."""
        return PERIOD_WINDOWS[self.period]

    def window_start(self, *, now: datetime) -> date:
        """The local start date of the window containing `now`."""
        return window_start_for(window=self.window, moment=now)


def key_budget_for(*, api_key_id: int | None, budget: Decimal | None, period: str) -> KeyBudget | None:
    """The budget a call on this credential counts against; None for a key without one (and for
    credentials that are not API keys), which then costs no statement at all."""
    if api_key_id is None or budget is None or not period:
        return None
    return KeyBudget(api_key_id=api_key_id, budget=budget, period=period)


def key_budget_hold_values(*, key_budget: KeyBudget | None, now: datetime) -> dict[str, Any]:
    """The hold's columns naming the key window it counts in (empty for a call without a budget)."""
    if key_budget is None:
        return {"api_key_id": None, "key_window": "", "key_window_start": None}
    return {
        "api_key_id": key_budget.api_key_id,
        "key_window": key_budget.window,
        "key_window_start": key_budget.window_start(now=now),
    }


def key_budget_statement_params(*, key_budget: KeyBudget) -> dict[str, Any]:
    """The parameters the reservation statements add for the key's window (the hold's key columns
    come with the hold's values)."""
    return {"key_budget": key_budget.budget, "key_updated_at": timezone.now()}


class KeyBudgetReached(Exception):
    """Raised inside a reservation's transaction when the key's window refuses the amount, so that
    everything the reservation counted before rolls back."""


def key_budget_count_orm(*, values: dict[str, Any], key_budget: KeyBudget) -> None:
    """The ORM form of counting a call in its key window, inside the reservation's transaction;
    KeyBudgetReached (rolling it back) when the window has no room for it."""
    amount = values["amount"]
    key = {
        "api_key_id": key_budget.api_key_id,
        "window": values["key_window"],
        "window_start": values["key_window_start"],
    }
    # Created on first use. ON CONFLICT DO NOTHING: concurrent first calls of a window all go on to
    # the conditional update instead of failing on the unique key.
    KeyBudgetUsage.objects.bulk_create([KeyBudgetUsage(**key)], ignore_conflicts=True)
    # Conditional update, checked by rows affected: the row lock makes a concurrent reservation wait
    # and re-check `used` against the committed value, so the budget is never overshot.
    counted = KeyBudgetUsage.objects.filter(**key, used__lte=key_budget.budget - amount).update(
        used=money_sql(F("used") + amount), updated_at=values["created_at"]
    )
    if counted != 1:
        raise KeyBudgetReached


def key_budget_give_back_orm(*, hold: Hold, amount: Decimal, now: datetime) -> None:
    """Give `amount` of a resolved hold back to the key window it was counted in (the ORM form, run
    by the caller that resolved the hold, in its transaction). Nothing for a hold without one."""
    if not hold.key_window or hold.api_key_id is None or hold.key_window_start is None or amount <= 0:
        return
    KeyBudgetUsage.objects.filter(
        api_key_id=hold.api_key_id, window=hold.key_window, window_start=hold.key_window_start
    ).update(used=money_sql(F("used") - amount), updated_at=now)


def key_budget_precheck(*, key_budget: KeyBudget | None, amount: Decimal, now: datetime) -> None:
    """Raise the key's refusal when its window has no room for `amount` now: a refusal that costs one
    read, for calls with expensive work before their reservation. Only a pre-check: the
    reservation's conditional update is the guarantee."""
    if key_budget is None:
        return
    used = _window_used(key_budget=key_budget, start=key_budget.window_start(now=now))
    if used + amount > key_budget.budget:
        raise key_budget_refusal(key_budget=key_budget, amount=amount, now=now)


def key_budget_refusal(*, key_budget: KeyBudget, amount: Decimal, now: datetime) -> UsageLimitExceeded:
    """429 USAGE_LIMIT_EXCEEDED naming the key's budget, what its window has used and when it
    resets; `retry_after` until the window ends. For the total window, which never resets, and for a
    call that costs more than the whole budget, waiting cannot help: the refusal is final (no
    Retry-After; `x-should-retry: false`, which the official SDKs honour)."""
    start = key_budget.window_start(now=now)
    used = _window_used(key_budget=key_budget, start=start)
    end = window_end(window=key_budget.window, start=start)
    budget = f"this API key's {key_budget.period} budget of {money_display(key_budget.budget)}"
    if amount > key_budget.budget:
        return UsageLimitExceeded(
            f"Usage limit exceeded: this call ({money_display(amount)}) costs more than {budget}.",
            final=True,
        )
    resets = "never resets" if end is None else f"resets at {end.isoformat()}"
    return UsageLimitExceeded(
        f"Usage limit exceeded: this call ({money_display(amount)}) would go over {budget} "
        f"({money_display(used)} used, {resets}).",
        retry_after=None if end is None else (end - now).total_seconds(),
        final=end is None,
    )


def _window_used(*, key_budget: KeyBudget, start: date) -> Decimal:
    """What the key's window starting on `start` has used, open holds included (0 before its first call)."""
    used = (
        KeyBudgetUsage.objects.filter(
            api_key_id=key_budget.api_key_id, window=key_budget.window, window_start=start
        )
        .values_list("used", flat=True)
        .first()
    )
    return used if used is not None else Decimal(0)
