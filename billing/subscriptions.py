"""Subscriptions: an account's plan for a subscription-billed group, and the reservation of a call
against its cap windows (day, week, month, total). The hold it writes is captured and released by
billing/holds.py."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Account
from billing.errors import UsageLimitExceeded
from billing.holds import hold_expiry
from billing.key_budgets import (
    KeyBudget,
    KeyBudgetReached,
    key_budget_count_orm,
    key_budget_hold_values,
    key_budget_refusal,
    key_budget_statement_params,
)
from billing.models import Hold, Subscription, SubscriptionUsage
from billing.money import money_display, money_parse, money_sql
from billing.statements import on_postgresql, statement_instance, statement_run, subscription_hold_reserve_sql
from billing.windows import (
    TOTAL_WINDOW_START,
    WINDOW_ORDER,
    window_end,
    window_starts_at,
)
from core.process_identity import process_owner
from groups.models import Group

WINDOW_NAMES = {"day": "daily", "week": "weekly", "month": "monthly", "total": "total"}

Windows = list[tuple[str, date, Decimal | None]]


def subscription_upsert(
    *,
    account: Account,
    group: Group,
    daily_limit: Decimal | None,
    weekly_limit: Decimal | None,
    monthly_limit: Decimal | None,
    total_limit: Decimal | None,
    starts_at: datetime,
    expires_at: datetime | None,
    model_ids: list[str] | None = None,
) -> tuple[Subscription, bool]:
    """Create or update the account's subscription for a group; returns (subscription, changed).

    Only `.pk` of the account and the group is read. `model_ids`: the model ids the plan covers
    ([] = every model of the group); None leaves an existing subscription's list as it is ([] for a
    new one)."""
    values: dict[str, Any] = {
        "daily_limit": daily_limit,
        "weekly_limit": weekly_limit,
        "monthly_limit": monthly_limit,
        "total_limit": total_limit,
        "starts_at": starts_at,
        "expires_at": expires_at,
    }
    if model_ids is not None:
        values["model_ids"] = sorted(set(model_ids))
    subscription = Subscription.objects.filter(account_id=account.pk, group_id=group.pk).first()
    if subscription is None:
        return Subscription.objects.create(account_id=account.pk, group_id=group.pk, **values), True
    changed = [name for name, value in values.items() if getattr(subscription, name) != value]
    for name in changed:
        setattr(subscription, name, values[name])
    if changed:
        subscription.save(update_fields=changed)
    return subscription, bool(changed)


def _subscription_windows(*, subscription: Subscription, now: datetime) -> Windows:
    starts = window_starts_at(moment=now)
    return [
        (SubscriptionUsage.Window.DAY, starts.day, subscription.daily_limit),
        (SubscriptionUsage.Window.WEEK, starts.week, subscription.weekly_limit),
        (SubscriptionUsage.Window.MONTH, starts.month, subscription.monthly_limit),
        (SubscriptionUsage.Window.TOTAL, TOTAL_WINDOW_START, subscription.total_limit),
    ]


class _CapReached(Exception):
    def __init__(self, window: str) -> None:
        super().__init__(window)
        self.window = window


def subscription_hold_reserve(
    *,
    subscription: Subscription,
    amount: Decimal,
    reference: str,
    now: datetime | None = None,
    ttl_seconds: int | None = None,
    key_budget: KeyBudget | None = None,
) -> Hold:
    """Reserve `amount` against every cap window of the subscription (day, week, month, total).

    One short transaction: per window a conditional UPDATE `used = used + amount WHERE used + amount
    <= cap`, all or none; a refused window rolls back the others and answers 429 rate_limit_error
    USAGE_LIMIT_EXCEEDED with Retry-After until the blocking window ends. Uncapped windows count
    too, so a cap added later starts from the real usage. On PostgreSQL the transaction holds one
    statement (three round trips: BEGIN, the statement, COMMIT).

    `key_budget`: the call is made with an API key that has a budget; the amount is counted in the
    key's current window too, after the subscription's, in the same transaction and statement. A
    key window without room refuses the call (429 USAGE_LIMIT_EXCEEDED naming the key's budget) and
    the subscription's windows are rolled back with it; a cap refusing leaves the key's window as it
    was.
    """
    value = money_parse(amount)
    moment = now or timezone.now()
    windows = _subscription_windows(subscription=subscription, now=moment)
    starts = {window: start for window, start, _ in windows}
    values = {
        "kind": Hold.Kind.SUBSCRIPTION,
        "subscription_id": subscription.pk,
        "amount": value,
        "status": Hold.Status.OPEN,
        "reference": reference,
        "owner": process_owner(),
        "day_start": starts["day"],
        "week_start": starts["week"],
        "month_start": starts["month"],
        "created_at": moment,
        "expires_at": hold_expiry(now=moment, ttl_seconds=ttl_seconds),
        **key_budget_hold_values(key_budget=key_budget, now=moment),
    }
    reserve = _subscription_hold_reserve_statement if on_postgresql() else _subscription_hold_reserve_orm
    try:
        # All or none: a refused window raises _CapReached (or the key's KeyBudgetReached), which
        # rolls back the windows already counted.
        with transaction.atomic():
            return reserve(values=values, windows=windows, key_budget=key_budget)
    except KeyBudgetReached:
        assert key_budget is not None  # only a keyed reservation counts a key's window
        raise key_budget_refusal(key_budget=key_budget, amount=value, now=moment) from None
    except _CapReached as refused:
        raise _usage_limit_error(
            subscription_id=subscription.pk, amount=value, windows=windows, refused=refused.window, now=moment
        ) from None


def _subscription_hold_reserve_statement(
    *, values: dict[str, Any], windows: Windows, key_budget: KeyBudget | None
) -> Hold:
    params: dict[str, Any] = {**values, "updated_at": timezone.now()}  # a new counter's, as auto_now
    if key_budget is not None:
        params.update(key_budget_statement_params(key_budget=key_budget))
    # Per window: its name, its start (day_start, week_start, month_start are also the hold's
    # columns) and its cap.
    for window, start, cap in windows:
        name = str(window)
        params.update({f"{name}_window": name, f"{name}_start": start, f"{name}_cap": cap})
    capped = frozenset(str(window) for window, _, cap in windows if cap is not None)
    row = statement_run(subscription_hold_reserve_sql(capped=capped, keyed=key_budget is not None), params)
    assert row is not None  # the final SELECT always returns one row
    # Per window in WINDOW_ORDER (then the key's window): 1 if counted, 0 if not.
    *counted, hold_id = row
    if hold_id is None:
        # The chain stops at the first refused window; the windows after it were not tried.
        refused = counted.index(0)
        if refused == len(WINDOW_ORDER):
            raise KeyBudgetReached
        raise _CapReached(WINDOW_ORDER[refused])
    return statement_instance(Hold, {"id": hold_id, **values})


def _subscription_hold_reserve_orm(
    *, values: dict[str, Any], windows: Windows, key_budget: KeyBudget | None
) -> Hold:
    subscription_id, amount = values["subscription_id"], values["amount"]
    # Counters are created on first use. ON CONFLICT DO NOTHING: concurrent first calls of a window
    # all go on to the conditional update below instead of failing on the unique key.
    SubscriptionUsage.objects.bulk_create(
        [
            SubscriptionUsage(subscription_id=subscription_id, window=window, window_start=start)
            for window, start, _ in windows
        ],
        ignore_conflicts=True,
    )
    # Always the same order (day, week, month, total): concurrent reservations lock the counter rows
    # in one order and cannot deadlock.
    for window, start, cap in windows:
        rows = SubscriptionUsage.objects.filter(
            subscription_id=subscription_id, window=window, window_start=start
        )
        if cap is not None:
            rows = rows.filter(used__lte=cap - amount)
        # Conditional update, checked by rows affected: the row lock makes a concurrent reservation
        # wait and re-check `used` against the committed value, so a cap is never overshot.
        if rows.update(used=money_sql(F("used") + amount)) != 1:
            raise _CapReached(window)
    if key_budget is not None:
        key_budget_count_orm(values=values, key_budget=key_budget)  # after the counters, as release
    hold = Hold(**values)
    hold.save(force_insert=True)
    return hold


def _usage_limit_error(
    *, subscription_id: int, amount: Decimal, windows: Windows, refused: str, now: datetime
) -> UsageLimitExceeded:
    """The refusal naming every window that blocks the call; retry_after: until the last of them
    ends, and none when one is a used-up total, which never resets (the refusal is final)."""
    used = {
        (row.window, row.window_start): row.used
        for row in SubscriptionUsage.objects.filter(subscription_id=subscription_id)
        if (row.window, row.window_start) in {(w, s) for w, s, _ in windows}
    }
    blocking: list[tuple[str, date, Decimal]] = [
        (window, start, cap)
        for window, start, cap in windows
        if cap is not None and used.get((window, start), Decimal(0)) + amount > cap
    ]
    if not blocking:  # freed meanwhile by a released call; the refused window still answers
        blocking = [(w, s, cap) for w, s, cap in windows if w == refused and cap is not None]
    waits: list[float] = []
    parts = []
    for window, start, cap in blocking:
        end = window_end(window=window, start=start)
        if end is not None:
            waits.append((end - now).total_seconds())
        resets = "never resets" if end is None else f"resets at {end.isoformat()}"
        parts.append(f"the {WINDOW_NAMES[window]} cap of {money_display(cap)} ({resets})")
    # A used-up total never resets: waiting cannot help, and the refusal says so.
    final = len(waits) < len(blocking)
    return UsageLimitExceeded(
        f"Usage limit exceeded: this call ({money_display(amount)}) would go over {' and '.join(parts)}.",
        retry_after=None if final else max(waits),
        final=final,
    )
