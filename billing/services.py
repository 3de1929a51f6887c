"""Every write to wallets, the ledger and subscriptions goes through these functions."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import DecimalField, F
from django.db.models.expressions import Combinable
from django.db.models.functions import Round
from django.utils import timezone

from accounts.models import Account, User
from billing.models import MONEY, Hold, LedgerEntry, Subscription, SubscriptionUsage, UsageRecord, Wallet
from billing.money import MoneyError, money_parse, money_str
from billing.windows import TOTAL_WINDOW_START, window_end, window_starts_at
from gateway_project.errors import (
    INSUFFICIENT_BALANCE,
    USAGE_LIMIT_EXCEEDED,
    BillingError,
    RateLimited,
)
from groups.models import Group

logger = logging.getLogger("gateway.billing")

# Retry-After for a used-up total quota, which never resets: retrying sooner cannot help.
TOTAL_CAP_RETRY_AFTER_SECONDS = 24 * 60 * 60


class InsufficientFunds(MoneyError):
    pass


def money_sql(expression: Combinable) -> Round:
    """Arithmetic on a money column inside an UPDATE, rounded to the money places.

    Exact NUMERIC arithmetic on PostgreSQL (the round is a no-op there); SQLite computes decimal
    columns in binary floating point, where 0.1 + 0.2 - 0.3 is not 0 and a CHECK (held >= 0) could
    refuse a correct release, so the result is rounded back to the money places."""
    return Round(expression, settings.MONEY_DECIMAL_PLACES, output_field=DecimalField(**MONEY))


def wallet_create(*, account: Account) -> Wallet:
    wallet, _ = Wallet.objects.get_or_create(account=account)
    return wallet


def _ledger_write(
    *,
    account: Account,
    kind: str,
    amount: Decimal,
    reference: str,
    note: str,
    created_by: User | None,
) -> LedgerEntry:
    """Move a wallet's balance by `amount` and append the ledger entry, in one short transaction.

    A negative amount only goes through while it leaves balance >= held: money reserved by open holds
    can never be taken away underneath them.
    """
    with transaction.atomic():
        # Lock the wallet row so balance_after is exactly this entry's result, even under concurrency.
        wallet = Wallet.objects.select_for_update().get(account=account)
        new_balance = wallet.balance + amount
        if new_balance < wallet.held:
            raise InsufficientFunds(
                f"this would leave the balance at {new_balance}, "
                f"below the {wallet.held} held by calls in flight"
            )
        Wallet.objects.filter(pk=wallet.pk).update(balance=money_sql(F("balance") + amount))
        return LedgerEntry.objects.create(
            wallet=wallet,
            kind=kind,
            amount=amount,
            balance_after=new_balance,
            reference=reference,
            note=note,
            created_by=created_by,
        )


def wallet_top_up(
    *,
    account: Account,
    amount: Decimal | str | int,
    note: str = "",
    reference: str = "",
    created_by: User | None = None,
) -> LedgerEntry:
    """Credit a wallet. The amount must be positive."""
    value = money_parse(amount, allow_zero=False)
    return _ledger_write(
        account=account,
        kind=LedgerEntry.Kind.TOP_UP,
        amount=value,
        reference=reference or "top-up",
        note=note,
        created_by=created_by,
    )


def wallet_adjust(
    *,
    account: Account,
    amount: Decimal | str | int,
    note: str,
    reference: str = "",
    created_by: User | None = None,
) -> LedgerEntry:
    """A signed correction by staff; a note saying why is required."""
    value = money_parse(amount, allow_negative=True, allow_zero=False)
    if not note.strip():
        raise MoneyError("an adjustment needs a note saying why")
    return _ledger_write(
        account=account,
        kind=LedgerEntry.Kind.ADJUSTMENT,
        amount=value,
        reference=reference or "adjustment",
        note=note,
        created_by=created_by,
    )


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

    `model_ids`: the model ids the plan covers ([] = every model of the group); None leaves an existing
    subscription's list as it is ([] for a new one)."""
    values = {
        "daily_limit": daily_limit,
        "weekly_limit": weekly_limit,
        "monthly_limit": monthly_limit,
        "total_limit": total_limit,
        "starts_at": starts_at,
        "expires_at": expires_at,
    }
    if model_ids is not None:
        values["model_ids"] = sorted(set(model_ids))
    subscription = Subscription.objects.filter(account=account, group=group).first()
    if subscription is None:
        return Subscription.objects.create(account=account, group=group, **values), True
    changed = [name for name, value in values.items() if getattr(subscription, name) != value]
    for name in changed:
        setattr(subscription, name, values[name])
    if changed:
        subscription.save(update_fields=changed)
    return subscription, bool(changed)


# --- Holds -------------------------------------------------------------------------------------------


def _hold_expiry(*, now: datetime, ttl_seconds: int | None) -> datetime:
    ttl = ttl_seconds if ttl_seconds is not None else settings.GATEWAY_HOLD_TTL_SECONDS
    return now + timedelta(seconds=ttl)


def hold_reserve(
    *,
    account: Account,
    amount: Decimal,
    reference: str,
    now: datetime | None = None,
    ttl_seconds: int | None = None,
) -> Hold:
    """Reserve `amount` of the account's available balance (balance - held) for one call.

    One short transaction: a conditional UPDATE that raises `held` only while the available balance
    covers the amount, plus the Hold row. Nothing is reserved when it does not: 403 billing_error
    INSUFFICIENT_BALANCE. Available balance therefore never goes below zero, whatever the concurrency.
    """
    value = money_parse(amount)
    moment = now or timezone.now()
    with transaction.atomic():
        # Conditional update, checked by rows affected: on PostgreSQL the row lock makes a concurrent
        # reserve wait and re-evaluate `balance >= held + amount` against the committed row, so two
        # calls can never both take the last money.
        updated = (
            Wallet.objects.alias(held_after=money_sql(F("held") + value))
            .filter(account=account, balance__gte=F("held_after"))
            .update(held=money_sql(F("held") + value))
        )
        if updated != 1:
            raise BillingError(
                f"Insufficient balance: this call costs ¥{money_str(value)} and the account's "
                "available balance does not cover it. Top up and try again.",
                code=INSUFFICIENT_BALANCE,
            )
        wallet_id = Wallet.objects.filter(account=account).values_list("pk", flat=True).get()
        return Hold.objects.create(
            kind=Hold.Kind.WALLET,
            wallet_id=wallet_id,
            amount=value,
            reference=reference,
            created_at=moment,
            expires_at=_hold_expiry(now=moment, ttl_seconds=ttl_seconds),
        )


def _subscription_windows(
    *, subscription: Subscription, now: datetime
) -> list[tuple[str, date, Decimal | None]]:
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


WINDOW_NAMES = {"day": "daily", "week": "weekly", "month": "monthly", "total": "total"}


def subscription_hold_reserve(
    *,
    subscription: Subscription,
    amount: Decimal,
    reference: str,
    now: datetime | None = None,
    ttl_seconds: int | None = None,
) -> Hold:
    """Reserve `amount` against every cap window of the subscription (day, week, month, total).

    One short transaction: per window a conditional UPDATE `used = used + amount WHERE used + amount
    <= cap`, all or none; a refused window rolls back the others and answers 429 rate_limit_error
    USAGE_LIMIT_EXCEEDED with Retry-After until the blocking window ends. Uncapped windows count
    too, so a cap added later starts from the real usage.
    """
    value = money_parse(amount)
    moment = now or timezone.now()
    windows = _subscription_windows(subscription=subscription, now=moment)
    try:
        with transaction.atomic():
            # Counters are created on first use. ON CONFLICT DO NOTHING: concurrent first calls of a
            # window all go on to the conditional update below instead of failing on the unique key.
            SubscriptionUsage.objects.bulk_create(
                [
                    SubscriptionUsage(subscription=subscription, window=window, window_start=start)
                    for window, start, _ in windows
                ],
                ignore_conflicts=True,
            )
            # Always the same order (day, week, month, total): concurrent reservations lock the
            # counter rows in one order and cannot deadlock.
            for window, start, cap in windows:
                rows = SubscriptionUsage.objects.filter(
                    subscription=subscription, window=window, window_start=start
                )
                if cap is not None:
                    rows = rows.filter(used__lte=cap - value)
                # Conditional update, checked by rows affected: the row lock makes a concurrent
                # reservation wait and re-check `used` against the committed value, so a cap is
                # never overshot.
                if rows.update(used=money_sql(F("used") + value)) != 1:
                    raise _CapReached(window)
            starts = {window: start for window, start, _ in windows}
            return Hold.objects.create(
                kind=Hold.Kind.SUBSCRIPTION,
                subscription=subscription,
                amount=value,
                reference=reference,
                day_start=starts["day"],
                week_start=starts["week"],
                month_start=starts["month"],
                created_at=moment,
                expires_at=_hold_expiry(now=moment, ttl_seconds=ttl_seconds),
            )
    except _CapReached as refused:
        raise _usage_limit_error(
            subscription=subscription, amount=value, windows=windows, refused=refused.window, now=moment
        ) from None


def _usage_limit_error(
    *,
    subscription: Subscription,
    amount: Decimal,
    windows: list[tuple[str, date, Decimal | None]],
    refused: str,
    now: datetime,
) -> RateLimited:
    """429 naming every window that blocks the call; Retry-After until the last of them ends."""
    used = {
        (row.window, row.window_start): row.used
        for row in SubscriptionUsage.objects.filter(subscription=subscription)
        if (row.window, row.window_start) in {(w, s) for w, s, _ in windows}
    }
    blocking = [
        (window, start, cap)
        for window, start, cap in windows
        if cap is not None and used.get((window, start), Decimal(0)) + amount > cap
    ]
    if not blocking:  # freed meanwhile by a released call; the refused window still answers
        blocking = [w for w in windows if w[0] == refused]
    waits = []
    for window, start, _ in blocking:
        end = window_end(window=window, start=start)
        waits.append(TOTAL_CAP_RETRY_AFTER_SECONDS if end is None else (end - now).total_seconds())
    parts = []
    for window, start, cap in blocking:
        end = window_end(window=window, start=start)
        resets = "never resets" if end is None else f"resets at {end.isoformat()}"
        parts.append(f"the {WINDOW_NAMES[window]} cap of ¥{money_str(cap)} ({resets})")
    return RateLimited(
        f"Usage limit exceeded: this call (¥{money_str(amount)}) would go over " + " and ".join(parts) + ".",
        code=USAGE_LIMIT_EXCEEDED,
        retry_after=max(waits),
    )


def hold_capture(*, hold: Hold, now: datetime | None = None) -> bool:
    """Resolve an open hold as used: a wallet hold becomes a ledger charge (reference = the hold's
    request id); a subscription hold's counted usage is kept.

    Exactly once: True only for the caller that moved the hold from `open` to `captured`. A hold
    already released (failed call) or expired (release_stale_holds) is not charged: False.
    """
    moment = now or timezone.now()
    with transaction.atomic():
        # Status transition guarded by the old status: of a capture racing a release or an expiry,
        # exactly one updates the row; the loser sees 0 rows and moves no money.
        won = Hold.objects.filter(pk=hold.pk, status=Hold.Status.OPEN).update(
            status=Hold.Status.CAPTURED, resolved_at=moment
        )
        if won != 1:
            return False
        if hold.kind == Hold.Kind.WALLET and hold.amount > 0:
            # Lock the wallet row so balance_after is exactly this charge's result under concurrency.
            wallet = Wallet.objects.select_for_update().get(pk=hold.wallet_id)
            Wallet.objects.filter(pk=wallet.pk).update(
                balance=money_sql(F("balance") - hold.amount), held=money_sql(F("held") - hold.amount)
            )
            LedgerEntry.objects.create(
                wallet=wallet,
                kind=LedgerEntry.Kind.CHARGE,
                amount=-hold.amount,
                balance_after=wallet.balance - hold.amount,
                reference=hold.reference,
            )
        return True


def hold_release(*, hold: Hold, now: datetime | None = None, expired: bool = False) -> bool:
    """Void an open hold: the wallet's `held` (or the subscription's window counters) go back down.

    Exactly once: True only for the caller that moved the hold out of `open`; a hold already captured
    or released is left alone (False). `expired` marks a release by release_stale_holds.
    """
    moment = now or timezone.now()
    new_status = Hold.Status.EXPIRED if expired else Hold.Status.RELEASED
    with transaction.atomic():
        # Status transition guarded by the old status: exactly one resolution per hold.
        won = Hold.objects.filter(pk=hold.pk, status=Hold.Status.OPEN).update(
            status=new_status, resolved_at=moment
        )
        if won != 1:
            return False
        if hold.kind == Hold.Kind.WALLET:
            # A relative update under the row lock; the held >= 0 constraint is the backstop.
            Wallet.objects.filter(pk=hold.wallet_id).update(held=money_sql(F("held") - hold.amount))
        else:
            # Give the quota back to exactly the windows it was taken from, in the reservation's
            # lock order (day, week, month, total).
            for window, start in (
                (SubscriptionUsage.Window.DAY, hold.day_start),
                (SubscriptionUsage.Window.WEEK, hold.week_start),
                (SubscriptionUsage.Window.MONTH, hold.month_start),
                (SubscriptionUsage.Window.TOTAL, TOTAL_WINDOW_START),
            ):
                SubscriptionUsage.objects.filter(
                    subscription_id=hold.subscription_id, window=window, window_start=start
                ).update(used=money_sql(F("used") - hold.amount))
        return True


def holds_release_stale(
    *, now: datetime | None = None, batch_size: int = 500, hold_ids: Iterable[int] | None = None
) -> int:
    """Expire every open hold whose expiry has passed (a worker died between reserve and capture).

    Safe to run on many machines at once: each hold is released through `hold_release`, whose guarded
    transition lets exactly one runner release it. Returns how many this run released.
    """
    moment = now or timezone.now()
    stale = Hold.objects.filter(status=Hold.Status.OPEN, expires_at__lte=moment)
    if hold_ids is not None:
        stale = stale.filter(pk__in=list(hold_ids))
    released = 0
    while True:
        batch = list(stale.order_by("expires_at", "pk")[:batch_size])
        for hold in batch:
            if hold_release(hold=hold, now=moment, expired=True):
                released += 1
        if len(batch) < batch_size:
            break
    if released:
        logger.warning("released %d stale hold(s) expired by %s", released, moment.isoformat())
    return released


# --- Usage log ---------------------------------------------------------------------------------------


def usage_record_create(
    *,
    request_id: str,
    account: Account,
    credential: str,
    group: Group | None,
    model_id: str,
    endpoint: str,
    billing: str,
    status: int,
    error_code: str,
    amount: Decimal,
    upstream: str,
    latency_ms: int,
    created_at: datetime | None = None,
) -> UsageRecord:
    return UsageRecord.objects.create(
        request_id=request_id[:200],
        account=account,
        credential=credential[:64],
        group=group,
        model_id=model_id[:200],
        endpoint=endpoint[:100],
        billing=billing,
        status=status,
        error_code=error_code[:100],
        amount=amount,
        upstream=upstream[:100],
        latency_ms=max(0, latency_ms),
        created_at=created_at or timezone.now(),
    )


def usage_records_purge(
    *, older_than_days: int | None = None, now: datetime | None = None, batch_size: int = 5000
) -> int:
    """Delete usage records older than the retention (GATEWAY_USAGE_RETENTION_DAYS), in batches so
    no statement locks the table for long. Returns how many were deleted."""
    days = older_than_days if older_than_days is not None else settings.GATEWAY_USAGE_RETENTION_DAYS
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted = 0
    while True:
        ids = list(
            UsageRecord.objects.filter(created_at__lt=cutoff)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return deleted
        count, _ = UsageRecord.objects.filter(pk__in=ids).delete()
        deleted += count
