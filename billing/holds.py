"""Holds: money (or subscription quota) reserved for one call, then captured or released once.

Each operation is one public function choosing its form: on PostgreSQL one statement
(billing/statements.py), elsewhere (SQLite) the ORM in one short transaction. Both forms sit side by
side here and give the same results; tests/billing runs the same cases on both databases.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from billing.errors import InsufficientBalance
from billing.key_budgets import (
    KeyBudget,
    KeyBudgetReached,
    key_budget_count_orm,
    key_budget_give_back_orm,
    key_budget_hold_values,
    key_budget_refusal,
    key_budget_statement_params,
)
from billing.models import Hold, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.money import money_display, money_parse, money_sql
from billing.statements import (
    hold_capture_sql,
    hold_release_sql,
    hold_reserve_keyed_sql,
    hold_reserve_sql,
    on_postgresql,
    statement_instance,
    statement_run,
    usage_record_fields,
)
from billing.usage import usage_record_insert
from billing.windows import TOTAL_WINDOW_START
from core.process_identity import process_owner

logger = logging.getLogger("gateway.billing")


def hold_expiry(*, now: datetime, ttl_seconds: int | None) -> datetime:
    ttl = ttl_seconds if ttl_seconds is not None else settings.GATEWAY_HOLD_TTL_SECONDS
    return now + timedelta(seconds=ttl)


# --- Reserve -----------------------------------------------------------------------------------------


def hold_reserve(
    *,
    account_id: int,
    amount: Decimal,
    reference: str,
    now: datetime | None = None,
    ttl_seconds: int | None = None,
    key_budget: KeyBudget | None = None,
) -> Hold:
    """Reserve `amount` of the account's available balance (balance - held) for one call.

    A conditional UPDATE raises `held` only while the available balance covers the amount, and the
    Hold row is written with it, all or nothing. Nothing is reserved when it does not: 403
    billing_error INSUFFICIENT_BALANCE. Available balance therefore never goes below zero, whatever
    the concurrency. On PostgreSQL this is one statement in autocommit (one round trip).

    `key_budget`: the call is made with an API key that has a budget; the amount is counted in the
    key's current window in the same transaction (billing/key_budgets.py), and a window without room
    refuses the call with 429 USAGE_LIMIT_EXCEEDED, nothing reserved. On PostgreSQL that is one
    statement in a transaction (BEGIN, the statement, COMMIT).
    """
    value = money_parse(amount)
    moment = now or timezone.now()
    values = {
        "kind": Hold.Kind.WALLET,
        "amount": value,
        "status": Hold.Status.OPEN,
        "reference": reference,
        "owner": process_owner(),
        "created_at": moment,
        "expires_at": hold_expiry(now=moment, ttl_seconds=ttl_seconds),
        **key_budget_hold_values(key_budget=key_budget, now=moment),
    }
    if key_budget is not None:
        hold = _hold_reserve_keyed(account_id=account_id, values=values, key_budget=key_budget)
    else:
        reserve = _hold_reserve_statement if on_postgresql() else _hold_reserve_orm
        hold = reserve(account_id=account_id, values=values)
    if hold is None:
        raise InsufficientBalance(
            f"Insufficient balance: this call costs {money_display(value)} and the account's "
            "available balance does not cover it. Top up and try again."
        )
    return hold


def _hold_reserve_statement(*, account_id: int, values: dict[str, Any]) -> Hold | None:
    row = statement_run(
        hold_reserve_sql(own_transaction=not connection.in_atomic_block),
        {"account_id": account_id, **values},
    )
    if row is None:
        return None
    hold_id, wallet_id = row
    return statement_instance(Hold, {"id": hold_id, "wallet_id": wallet_id, **values})


def _hold_reserve_orm(*, account_id: int, values: dict[str, Any]) -> Hold | None:
    amount = values["amount"]
    with transaction.atomic():
        # Conditional update, checked by rows affected: the row lock makes a concurrent reserve wait
        # and re-evaluate `balance >= held + amount` against the committed row, so two calls can
        # never both take the last money.
        updated = (
            Wallet.objects.alias(held_after=money_sql(F("held") + amount))
            .filter(account_id=account_id, balance__gte=F("held_after"))
            .update(held=money_sql(F("held") + amount), updated_at=values["created_at"])
        )
        if updated != 1:
            return None
        wallet_id = Wallet.objects.filter(account_id=account_id).values_list("pk", flat=True).get()
        hold = Hold(wallet_id=wallet_id, **values)
        hold.save(force_insert=True)
        return hold


def _hold_reserve_keyed(*, account_id: int, values: dict[str, Any], key_budget: KeyBudget) -> Hold | None:
    """The wallet hold of a call on a key with a budget: the wallet, then the key's window, in one
    transaction (the lock order capture and release keep too). None: the balance does not cover it;
    the key's window refusing raises UsageLimitExceeded. Either way nothing stays reserved."""
    try:
        with transaction.atomic():
            if not on_postgresql():
                hold = _hold_reserve_orm(account_id=account_id, values=values)
                if hold is not None:
                    key_budget_count_orm(values=values, key_budget=key_budget)
                return hold
            params = {
                "account_id": account_id,
                **values,
                **key_budget_statement_params(key_budget=key_budget),
            }
            row = statement_run(hold_reserve_keyed_sql(), params)
            assert row is not None  # the final SELECT always returns one row
            reserved, hold_id, wallet_id = row
            if not reserved:
                return None
            if hold_id is None:
                raise KeyBudgetReached  # rolls back the wallet's reservation
            return statement_instance(Hold, {"id": hold_id, "wallet_id": wallet_id, **values})
    except KeyBudgetReached:
        raise key_budget_refusal(
            key_budget=key_budget, amount=values["amount"], now=values["created_at"]
        ) from None


# --- Capture -----------------------------------------------------------------------------------------


def hold_capture(
    *,
    hold: Hold,
    amount: Decimal | None = None,
    now: datetime | None = None,
    usage_record: UsageRecord | None = None,
) -> bool:
    """Resolve an open hold as used: a wallet hold becomes a ledger charge (reference = the hold's
    request id); a subscription hold's counted usage is kept.

    `amount`: what to charge, for a call whose cost is known only afterwards (a text call's tokens);
    at most the hold's amount (more is cut to it: a call never costs more than was reserved), and
    the rest of the hold is released by the same capture. None charges the whole hold. A capture of
    0 resolves the hold without a ledger entry. `hold.captured_amount` is set to what was charged.

    Exactly once: True only for the caller that moved the hold from `open` to `captured`. A hold
    already released (failed call) or expired (release_stale_holds) is not charged: False. Nor is a
    hold whose id now belongs to another call's hold (another reference: a reservation lost in a
    database crash, billing/statements.py `hold_reserve_sql`): False, and that hold is left alone.

    `usage_record` (unsaved, from `usage_record_build`): the call's usage record, written with the
    capture, all or nothing, its `amount` set to what this capture charged (or counted), 0 when the
    hold was no longer open; its pk is set once written. On PostgreSQL the capture, the ledger charge
    and the record are one statement. Should the database refuse the record itself (e.g. its group was
    deleted meanwhile), the failed statement changed nothing: the hold is captured without it and the
    record is left unsaved (pk None) for the caller to write, so a successful call is still charged
    and answered.

    A hold counted in an API key's budget window gives that window back what it did not charge, in
    the same statement (PostgreSQL) or transaction, only when this caller won the transition.
    """
    moment = now or timezone.now()
    charge = hold.amount if amount is None else min(money_parse(amount), hold.amount)
    capture = _hold_capture_statement if on_postgresql() else _hold_capture_orm
    won = None
    if usage_record is not None:
        try:
            with _savepoint_if_in_transaction():
                won = capture(hold=hold, charge=charge, now=moment, usage_record=usage_record)
        except (IntegrityError, DataError):
            logger.exception(
                "could not write the usage record of request %s with its capture; capturing without it",
                usage_record.request_id,
            )
            usage_record.pk = None
    if won is None:
        won = capture(hold=hold, charge=charge, now=moment, usage_record=None)
    if won:
        hold.captured_amount = charge
        hold.status = Hold.Status.CAPTURED
        if hold.kind == Hold.Kind.SUBSCRIPTION and charge < hold.amount:
            _subscription_windows_give_back(hold=hold, amount=hold.amount - charge)
    return won


def _savepoint_if_in_transaction() -> AbstractContextManager[object]:
    """Inside a transaction, a savepoint, so that a refused statement does not abort it; outside one
    (autocommit, as metered calls run), nothing: a failed statement has rolled back on its own, and a
    BEGIN would cost a round trip."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def _hold_capture_statement(
    *, hold: Hold, charge: Decimal, now: datetime, usage_record: UsageRecord | None
) -> bool:
    params: dict[str, Any] = {
        "hold_id": hold.pk,
        "reference": hold.reference,
        "capture_amount": charge,
        "open": Hold.Status.OPEN,
        "captured": Hold.Status.CAPTURED,
        "charge": LedgerEntry.Kind.CHARGE,
        "now": now,
        "written_at": timezone.now(),  # the ledger entry's created_at, as auto_now_add sets it
    }
    if usage_record is not None:
        for field in usage_record_fields():
            params[f"usage_{field.attname}"] = getattr(usage_record, field.attname)
    sql = hold_capture_sql(recorded=usage_record is not None, keyed=bool(hold.key_window))
    row = statement_run(sql, params)
    assert row is not None  # the final SELECT always returns one row
    if usage_record is not None:
        usage_record.pk, usage_record.amount = row[1], row[2]
    return bool(row[0])


def _hold_capture_orm(
    *, hold: Hold, charge: Decimal, now: datetime, usage_record: UsageRecord | None
) -> bool:
    with transaction.atomic():
        # Status transition guarded by the old status: of a capture racing a release or an expiry,
        # exactly one updates the row; the loser sees 0 rows and moves no money.
        won = (
            Hold.objects.filter(pk=hold.pk, reference=hold.reference, status=Hold.Status.OPEN).update(
                status=Hold.Status.CAPTURED, resolved_at=now, captured_amount=charge
            )
            == 1
        )
        if won and hold.kind == Hold.Kind.WALLET and hold.amount > 0:
            # Lock the wallet row so balance_after is exactly this charge's result under concurrency.
            # The whole hold leaves `held`; only the charge leaves the balance.
            assert hold.wallet_id is not None  # a wallet hold names its wallet (hold_reserve)
            wallet = Wallet.objects.select_for_update().get(pk=hold.wallet_id)
            # update() skips auto_now: updated_at is set with the columns it stands for.
            Wallet.objects.filter(pk=wallet.pk).update(
                balance=money_sql(F("balance") - charge),
                held=money_sql(F("held") - hold.amount),
                updated_at=now,
            )
            if charge > 0:
                LedgerEntry.objects.create(
                    wallet_id=wallet.pk,
                    kind=LedgerEntry.Kind.CHARGE,
                    amount=-charge,
                    balance_after=wallet.balance - charge,
                    reference=hold.reference,
                )
        if won:
            # After the wallet's row, as the reservation locked them.
            key_budget_give_back_orm(hold=hold, amount=hold.amount - charge, now=now)
        if usage_record is not None:
            # What this capture charged; a hold no longer open charged nothing.
            usage_record.amount = charge if won else Decimal("0")
            usage_record_insert(record=usage_record)
        return won


def _subscription_windows_give_back(*, hold: Hold, amount: Decimal) -> None:
    """A subscription hold captured for less than it counted: give the difference back to exactly
    the windows it was counted in, in the reservation's lock order (day, week, month, total)."""
    # A subscription hold names its subscription and its windows (subscription_hold_reserve).
    assert hold.subscription_id is not None
    assert hold.day_start is not None and hold.week_start is not None and hold.month_start is not None
    with transaction.atomic():
        for window, start in (
            (SubscriptionUsage.Window.DAY, hold.day_start),
            (SubscriptionUsage.Window.WEEK, hold.week_start),
            (SubscriptionUsage.Window.MONTH, hold.month_start),
            (SubscriptionUsage.Window.TOTAL, TOTAL_WINDOW_START),
        ):
            SubscriptionUsage.objects.filter(
                subscription_id=hold.subscription_id, window=window, window_start=start
            ).update(used=money_sql(F("used") - amount))


# --- Release -----------------------------------------------------------------------------------------


def hold_release(*, hold: Hold, now: datetime | None = None, expired: bool = False) -> bool:
    """Void an open hold: the wallet's `held` (or the subscription's window counters) go back down.

    Exactly once: True only for the caller that moved the hold out of `open`; a hold already captured
    or released is left alone (False). `expired` marks a release by release_stale_holds. A wallet
    hold's release is one statement on PostgreSQL. A hold counted in an API key's budget window gives
    all of it back to that window with the same statement (or transaction), by the winner only.
    """
    moment = now or timezone.now()
    status = Hold.Status.EXPIRED if expired else Hold.Status.RELEASED
    if hold.kind == Hold.Kind.WALLET and on_postgresql():
        return _hold_release_statement(hold=hold, now=moment, status=status)
    return _hold_release_orm(hold=hold, now=moment, status=status)


def _hold_release_statement(*, hold: Hold, now: datetime, status: str) -> bool:
    params = {
        "hold_id": hold.pk,
        "reference": hold.reference,
        "open": Hold.Status.OPEN,
        "status": status,
        "now": now,
    }
    row = statement_run(hold_release_sql(keyed=bool(hold.key_window)), params)
    return bool(row and row[0])


def _hold_release_orm(*, hold: Hold, now: datetime, status: str) -> bool:
    with transaction.atomic():
        # Status transition guarded by the old status: exactly one resolution per hold.
        won = Hold.objects.filter(pk=hold.pk, reference=hold.reference, status=Hold.Status.OPEN).update(
            status=status, resolved_at=now
        )
        if won != 1:
            return False
        if hold.kind == Hold.Kind.WALLET:
            # A relative update under the row lock; the held >= 0 constraint is the backstop.
            assert hold.wallet_id is not None  # a wallet hold names its wallet (hold_reserve)
            Wallet.objects.filter(pk=hold.wallet_id).update(
                held=money_sql(F("held") - hold.amount), updated_at=now
            )
        else:
            _subscription_windows_give_back(hold=hold, amount=hold.amount)
        # After the wallet's row (or the subscription's counters), as the reservation locked them.
        key_budget_give_back_orm(hold=hold, amount=hold.amount, now=now)
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


def holds_release_owner(*, owner: str, now: datetime | None = None) -> int:
    """Release every open hold of the process `owner` (`<instance>:<pid>`, core.process_identity),
    which has died: none of its calls can be captured any more. Each through `hold_release`, whose
    guarded transition leaves a hold its call captured meanwhile alone. Returns how many it released."""
    moment = now or timezone.now()
    released = 0
    for hold in Hold.objects.filter(status=Hold.Status.OPEN, owner=owner).order_by("pk"):
        if hold_release(hold=hold, now=moment):
            released += 1
    if released:
        logger.warning("released %d open hold(s) of process %s, which died", released, owner)
    return released
