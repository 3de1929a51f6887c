"""Every write to wallets, the ledger and subscriptions goes through these functions."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import date, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    DataError,
    IntegrityError,
    connection,
    connections,
    models,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DecimalField, F
from django.db.models.expressions import Combinable
from django.db.models.functions import Round
from django.utils import timezone

from accounts.models import Account, User
from billing.models import MONEY, Hold, LedgerEntry, Subscription, SubscriptionUsage, UsageRecord, Wallet
from billing.money import MoneyError, money_parse, money_str
from billing.windows import TOTAL_WINDOW_START, window_end, window_starts_at
from core.errors import (
    INSUFFICIENT_BALANCE,
    USAGE_LIMIT_EXCEEDED,
    BillingError,
    RateLimited,
)
from core.modelutils import queryset_delete_in_batches
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


def _on_postgresql() -> bool:
    """PostgreSQL runs the hot path (reserve, capture) as single statements with data-modifying CTEs;
    SQLite has no DML inside WITH, so it runs the ORM path: the same results in one transaction."""
    return connection.vendor == "postgresql"


def _sql_names(model: type[models.Model]) -> SimpleNamespace:
    """Quoted table and column names of a model for hand-written SQL: `.table`, and one attribute per
    concrete field under its attname (`.wallet_id`, `.held`, ...), so the SQL follows the models."""
    quote = connection.ops.quote_name
    names = {field.attname: quote(field.column) for field in model._meta.concrete_fields}
    return SimpleNamespace(table=quote(model._meta.db_table), **names)


class _PreparedCursor(psycopg.Cursor):
    """A server-side-binding cursor whose statements PostgreSQL prepares once per connection.

    The hot statements (reserve, capture) are long CTEs: parsing and planning them again on every
    call cost PostgreSQL ~0.1 ms each, and psycopg's client-side binding (Django's default) rebuilt
    their text in Python. Prepared, each call sends only the parameters. Django keeps prepared
    statements off for its own queries (connection poolers such as PgBouncer in transaction mode
    need version 1.21+ with max_prepared_statements for them); DATABASE_PREPARED_STATEMENTS=0 turns
    these off too."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        return super().execute(query, params, prepare=True, binary=binary)

    def _convert_query(self, query: Any, params: Any = None) -> Any:
        # Keep the statement as sent (with $n placeholders), as a client-side cursor does: Django's
        # query log (DEBUG, CaptureQueriesContext) reads it from here.
        self._query = super()._convert_query(query, params)
        return self._query


def _statement_run(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one hot statement (prepared, see `_PreparedCursor`) and return its first row, through
    Django's cursor wrapping (query logging, execute_wrappers, database error translation), as
    `connection.cursor()` wraps the cursors it creates."""
    # The connection of this thread (or greenlet), looked up once: every attribute read through the
    # `connection` proxy looks it up again.
    conn = connections[DEFAULT_DB_ALIAS]
    if not settings.DATABASE_PREPARED_STATEMENTS:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()
    with _statement_connection(conn) as raw:
        # The pool's connections keep one open cursor per hot statement, executed again call after
        # call: psycopg keeps a cursor's adaptation state (the dumper of each parameter's type) while
        # it runs the same statement again, which a new cursor per call worked out anew (-6 %
        # instructions per call in-process). A connection is lent to one caller at a time, and its
        # cursors with it.
        # A connection made outside the pool has no `hot_cursors`: a cursor for this statement only.
        cursors = getattr(raw, "hot_cursors", None)
        raw_cursor = cursors.get(sql) if cursors is not None else None
        if raw_cursor is None or raw_cursor.closed:
            with conn.wrap_database_errors:
                raw_cursor = _PreparedCursor(raw)
            if cursors is not None:
                cursors[sql] = raw_cursor
        cursor = conn._prepare_cursor(raw_cursor)
        try:
            cursor.execute(sql, params)
            return cursor.fetchone()
        finally:
            if cursors is None:
                cursor.close()


@contextmanager
def _statement_connection(conn: BaseDatabaseWrapper) -> Iterator[psycopg.Connection]:
    """The psycopg connection a hot statement runs on.

    With the connection pool, a call between statements holds no connection (`connection_release`):
    the statement then borrows one from Django's pool just for itself, without making it this
    thread's Django connection (Django's connect and close cost ~70 µs of Python per loan: settings
    copied, autocommit and time zone checked, a signal sent). Inside a transaction, or when the thread
    already holds a connection, it runs on that one, so that it sees and joins what the thread did.
    """
    if conn.connection is not None or conn.in_atomic_block or not conn.settings_dict["OPTIONS"].get("pool"):
        conn.close_if_health_check_failed()
        conn.ensure_connection()
        yield conn.connection
        return
    pool = conn.pool
    with conn.wrap_database_errors:
        if pool.closed:
            pool.open()  # as Django's connect does: nothing has used the pool yet
        raw = pool.getconn()
    try:
        if not raw.autocommit:  # a connection Django has not used yet
            with conn.wrap_database_errors:
                raw.autocommit = True
        yield raw
    finally:
        pool.putconn(raw)


M = TypeVar("M", bound=models.Model)


def _as_saved(instance: M) -> M:
    """Mark an instance built from values a statement has just written as a saved row, so callers get
    a model instance without a second round trip to read it back."""
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance


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

    A conditional UPDATE raises `held` only while the available balance covers the amount, and the
    Hold row is written with it, all or nothing. Nothing is reserved when it does not: 403
    billing_error INSUFFICIENT_BALANCE. Available balance therefore never goes below zero, whatever
    the concurrency. On PostgreSQL this is one statement in autocommit (one round trip).
    """
    value = money_parse(amount)
    moment = now or timezone.now()
    hold = Hold(
        kind=Hold.Kind.WALLET,
        amount=value,
        status=Hold.Status.OPEN,
        reference=reference,
        created_at=moment,
        expires_at=_hold_expiry(now=moment, ttl_seconds=ttl_seconds),
    )
    if _on_postgresql():
        row = _statement_run(
            _hold_reserve_sql(own_transaction=not connection.in_atomic_block),
            {
                "account_id": account.pk,
                "amount": value,
                "kind": hold.kind,
                "status": hold.status,
                "reference": reference,
                "created_at": hold.created_at,
                "expires_at": hold.expires_at,
            },
        )
        if row is not None:
            hold.pk, hold.wallet_id = row
            return _as_saved(hold)
    else:
        with transaction.atomic():
            # Conditional update, checked by rows affected: the row lock makes a concurrent reserve
            # wait and re-evaluate `balance >= held + amount` against the committed row, so two calls
            # can never both take the last money.
            updated = (
                Wallet.objects.alias(held_after=money_sql(F("held") + value))
                .filter(account_id=account.pk, balance__gte=F("held_after"))
                .update(held=money_sql(F("held") + value))
            )
            if updated == 1:
                hold.wallet_id = (
                    Wallet.objects.filter(account_id=account.pk).values_list("pk", flat=True).get()
                )
                hold.save(force_insert=True)
                return hold
    raise BillingError(
        f"Insufficient balance: this call costs ¥{money_str(value)} and the account's "
        "available balance does not cover it. Top up and try again.",
        code=INSUFFICIENT_BALANCE,
    )


@functools.cache
def _hold_reserve_sql(*, own_transaction: bool) -> str:
    """Reserve as ONE statement (PostgreSQL): the conditional UPDATE of the wallet and the INSERT of
    the hold run inside the server, so the wallet's row lock is held only for the length of this
    statement, never across a client round trip (under load, a round trip in a busy process waits for
    the GIL for milliseconds, and every call of the account would queue behind the lock meanwhile).

    Conditional UPDATE, checked by the row it returns: a concurrent reserve waits for the row lock,
    then re-evaluates `balance >= held + amount` against the committed row (READ COMMITTED), so two
    calls can never both take the last money. No row returned: insufficient balance, nothing written.

    `own_transaction` (the statement is its own transaction, autocommit): it commits without waiting
    for the WAL flush (`synchronous_commit = off` for this transaction only; ~0.13 ms less per call on
    fsync'ing storage). That is safe for a reservation and only for it: it moves no money, only `held`
    and an open hold. PostgreSQL writes WAL in order, so the capture (or release) that follows it,
    which commits synchronously, makes the reservation durable too; a crash can only lose a
    reservation nothing durable depends on yet, and such a call is then simply not charged. Inside a
    caller's transaction the setting would apply to that transaction's other writes: not used there.
    """
    w, h = _sql_names(Wallet), _sql_names(Hold)
    no_flush_wait = (
        "no_flush_wait AS (SELECT set_config('synchronous_commit', 'off', true))," if own_transaction else ""
    )
    return f"""
        WITH {no_flush_wait}
        reserved AS (
            UPDATE {w.table} SET {w.held} = {w.held} + %(amount)s
            WHERE {w.account_id} = %(account_id)s AND {w.balance} >= {w.held} + %(amount)s
            RETURNING {w.id} AS wallet_id
        )
        INSERT INTO {h.table} (
            {h.kind}, {h.wallet_id}, {h.amount}, {h.status}, {h.reference}, {h.created_at}, {h.expires_at}
        )
        SELECT %(kind)s, reserved.wallet_id, %(amount)s, %(status)s, %(reference)s, %(created_at)s,
            %(expires_at)s
        FROM reserved{" CROSS JOIN no_flush_wait" if own_transaction else ""}
        RETURNING {h.id}, {h.wallet_id}
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


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
# The one order in which reservations and releases touch a subscription's counters (no deadlocks).
WINDOW_ORDER = ("day", "week", "month", "total")


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
    too, so a cap added later starts from the real usage. On PostgreSQL the transaction holds one
    statement (three round trips: BEGIN, the statement, COMMIT).
    """
    value = money_parse(amount)
    moment = now or timezone.now()
    windows = _subscription_windows(subscription=subscription, now=moment)
    starts = {window: start for window, start, _ in windows}
    hold = Hold(
        kind=Hold.Kind.SUBSCRIPTION,
        subscription=subscription,
        amount=value,
        status=Hold.Status.OPEN,
        reference=reference,
        day_start=starts["day"],
        week_start=starts["week"],
        month_start=starts["month"],
        created_at=moment,
        expires_at=_hold_expiry(now=moment, ttl_seconds=ttl_seconds),
    )
    try:
        # All or none: a refused window raises _CapReached, which rolls back the windows already
        # counted.
        with transaction.atomic():
            if _on_postgresql():
                _subscription_hold_reserve_statement(hold=hold, windows=windows)
            else:
                _subscription_hold_reserve_orm(hold=hold, windows=windows)
    except _CapReached as refused:
        raise _usage_limit_error(
            subscription=subscription, amount=value, windows=windows, refused=refused.window, now=moment
        ) from None
    return hold


def _subscription_hold_reserve_orm(*, hold: Hold, windows: list[tuple[str, date, Decimal | None]]) -> None:
    # Counters are created on first use. ON CONFLICT DO NOTHING: concurrent first calls of a window
    # all go on to the conditional update below instead of failing on the unique key.
    SubscriptionUsage.objects.bulk_create(
        [
            SubscriptionUsage(subscription_id=hold.subscription_id, window=window, window_start=start)
            for window, start, _ in windows
        ],
        ignore_conflicts=True,
    )
    # Always the same order (day, week, month, total): concurrent reservations lock the counter rows
    # in one order and cannot deadlock.
    for window, start, cap in windows:
        rows = SubscriptionUsage.objects.filter(
            subscription_id=hold.subscription_id, window=window, window_start=start
        )
        if cap is not None:
            rows = rows.filter(used__lte=cap - hold.amount)
        # Conditional update, checked by rows affected: the row lock makes a concurrent reservation
        # wait and re-check `used` against the committed value, so a cap is never overshot.
        if rows.update(used=money_sql(F("used") + hold.amount)) != 1:
            raise _CapReached(window)
    hold.save(force_insert=True)


def _subscription_hold_reserve_statement(
    *, hold: Hold, windows: list[tuple[str, date, Decimal | None]]
) -> None:
    params: dict[str, Any] = {
        "subscription_id": hold.subscription_id,
        "amount": hold.amount,
        "updated_at": timezone.now(),  # a new counter's, as auto_now sets it
        "kind": hold.kind,
        "status": hold.status,
        "reference": hold.reference,
        "created_at": hold.created_at,
        "expires_at": hold.expires_at,
    }
    # Per window: its name, its start (day_start, week_start, month_start are also the hold's
    # columns) and its cap.
    for window, start, cap in windows:
        name = str(window)
        params.update({f"{name}_window": name, f"{name}_start": start, f"{name}_cap": cap})
    capped = frozenset(str(window) for window, _, cap in windows if cap is not None)
    row = _statement_run(_subscription_hold_reserve_sql(capped=capped), params)
    assert row is not None  # the final SELECT always returns one row
    *counted, hold_id = row  # per window in WINDOW_ORDER: 1 if counted, 0 if not
    if hold_id is None:
        # The chain stops at the first refused window; the windows after it were not tried.
        raise _CapReached(WINDOW_ORDER[counted.index(0)])
    hold.pk = hold_id
    _as_saved(hold)


@functools.cache
def _subscription_hold_reserve_sql(*, capped: frozenset[str]) -> str:
    """Count the amount in every window and write the hold in ONE statement (PostgreSQL), run in a
    transaction so that a window refused after others were counted rolls them back.

    Per window an upsert: a missing counter is created (the first call of a day) at `amount`, an
    existing one is raised with the conditional `used + amount <= cap`, which PostgreSQL evaluates on
    the locked, committed row, so a cap is never overshot. Each window's upsert runs only once the
    previous window's has returned its row (`EXISTS (SELECT FROM counted_<previous>)`): this data
    dependency makes PostgreSQL lock the counters in the fixed order day, week, month, total (the
    order release uses too, so they cannot deadlock), and the chain stops at the first refused
    window. The hold is written only when all four counted. `capped` names the windows that have a
    cap: one statement per combination.
    """
    u, h = _sql_names(SubscriptionUsage), _sql_names(Hold)
    counters = []
    previous = None
    for window in WINDOW_ORDER:
        has_cap = window in capped
        conditions = [f"EXISTS (SELECT FROM {previous})"] if previous else []
        if has_cap:
            conditions.append(f"%(amount)s <= %({window}_cap)s")  # a new counter must fit too
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        guard = f"WHERE counter.{u.used} + EXCLUDED.{u.used} <= %({window}_cap)s" if has_cap else ""
        key = f"{u.subscription_id}, {u.window}, {u.window_start}"
        counters.append(
            f"""
        counted_{window} AS (
            INSERT INTO {u.table} AS counter ({key}, {u.used}, {u.updated_at})
            SELECT %(subscription_id)s, %({window}_window)s, %({window}_start)s, %(amount)s, %(updated_at)s
            {where}
            ON CONFLICT ({key}) DO UPDATE SET {u.used} = counter.{u.used} + EXCLUDED.{u.used}
            {guard}
            RETURNING 1
        )"""
        )
        previous = f"counted_{window}"
    counts = ", ".join(f"(SELECT count(*) FROM counted_{w})" for w in WINDOW_ORDER)  # noqa: S608
    return f"""
        WITH {",".join(counters)},
        held AS (
            INSERT INTO {h.table} (
                {h.kind}, {h.subscription_id}, {h.amount}, {h.status}, {h.reference}, {h.day_start},
                {h.week_start}, {h.month_start}, {h.created_at}, {h.expires_at}
            )
            SELECT %(kind)s, %(subscription_id)s, %(amount)s, %(status)s, %(reference)s, %(day_start)s,
                %(week_start)s, %(month_start)s, %(created_at)s, %(expires_at)s
            WHERE EXISTS (SELECT FROM {previous})
            RETURNING {h.id}
        )
        SELECT {counts}, (SELECT {h.id} FROM held)
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


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


def hold_capture(*, hold: Hold, now: datetime | None = None, usage_record: UsageRecord | None = None) -> bool:
    """Resolve an open hold as used: a wallet hold becomes a ledger charge (reference = the hold's
    request id); a subscription hold's counted usage is kept.

    Exactly once: True only for the caller that moved the hold from `open` to `captured`. A hold
    already released (failed call) or expired (release_stale_holds) is not charged: False.

    `usage_record` (unsaved, from `usage_record_build`): the call's usage record, written with the
    capture, all or nothing, its `amount` set to what this capture charged (or counted), 0 when the
    hold was no longer open; its pk is set once written. On PostgreSQL the capture, the ledger charge
    and the record are one statement. Should the database refuse the record itself (e.g. its group was
    deleted meanwhile), the failed statement changed nothing: the hold is captured without it and the
    record is left unsaved for the caller to write, so a successful call is still charged and answered.
    """
    moment = now or timezone.now()
    if usage_record is not None:
        try:
            with _savepoint_if_in_transaction():
                return _hold_capture(hold=hold, now=moment, usage_record=usage_record)
        except (IntegrityError, DataError):
            logger.exception(
                "could not write the usage record of request %s with its capture; capturing without it",
                usage_record.request_id,
            )
            usage_record.pk = None
            usage_record._state.adding = True
    return _hold_capture(hold=hold, now=moment, usage_record=None)


def _savepoint_if_in_transaction() -> AbstractContextManager[object]:
    """Inside a transaction, a savepoint, so that a refused statement does not abort it; outside one
    (autocommit, as metered calls run), nothing: a failed statement has rolled back on its own, and a
    BEGIN would cost a round trip."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def _hold_capture(*, hold: Hold, now: datetime, usage_record: UsageRecord | None) -> bool:
    if _on_postgresql():
        return _hold_capture_statement(hold=hold, now=now, usage_record=usage_record)
    with transaction.atomic():
        # Status transition guarded by the old status: of a capture racing a release or an expiry,
        # exactly one updates the row; the loser sees 0 rows and moves no money.
        won = (
            Hold.objects.filter(pk=hold.pk, status=Hold.Status.OPEN).update(
                status=Hold.Status.CAPTURED, resolved_at=now
            )
            == 1
        )
        if won and hold.kind == Hold.Kind.WALLET and hold.amount > 0:
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
        if usage_record is not None:
            # What this capture charged; a hold no longer open charged nothing.
            usage_record.amount = hold.amount if won else Decimal("0")
            usage_record_insert(record=usage_record)
        return won


def _hold_capture_statement(*, hold: Hold, now: datetime, usage_record: UsageRecord | None) -> bool:
    params: dict[str, Any] = {
        "hold_id": hold.pk,
        "open": Hold.Status.OPEN,
        "captured": Hold.Status.CAPTURED,
        "charge": LedgerEntry.Kind.CHARGE,
        "now": now,
        "written_at": timezone.now(),  # the ledger entry's created_at, as auto_now_add sets it
    }
    if usage_record is not None:
        for field in _usage_record_fields():
            params[f"usage_{field.attname}"] = getattr(usage_record, field.attname)
    row = _statement_run(_hold_capture_sql(recorded=usage_record is not None), params)
    assert row is not None  # the final SELECT always returns one row
    if usage_record is not None:
        usage_record.pk, usage_record.amount = row[1], row[2]
        _as_saved(usage_record)
    return bool(row[0])


def _usage_record_fields() -> list[models.Field]:
    return [field for field in UsageRecord._meta.concrete_fields if not field.primary_key]


@functools.cache
def _hold_capture_sql(*, recorded: bool) -> str:
    """Capture as ONE statement (PostgreSQL), and with `recorded` the call's usage record too: no
    transaction and no lock held across a client round trip, and the charge and its record can only
    be written together.

    - `captured`: the status transition guarded by the old status: of a capture racing a release or
      an expiry exactly one updates the hold; the loser gets no row and everything below moves nothing.
    - `debited`: the wallet's balance and held go down by the amount (only for a wallet hold of a
      non-zero amount). The UPDATE locks the wallet row and, under concurrency, computes from the
      committed row, so the balance it returns is exactly this charge's balance_after.
    - `charged`: the ledger charge (append-only), with that balance_after and the hold's request id.
    - `recorded`: the usage record, with the amount captured, or 0 when the hold was no longer open.
    """
    h, w, e = _sql_names(Hold), _sql_names(Wallet), _sql_names(LedgerEntry)
    ledger_columns = ", ".join(
        (e.wallet_id, e.kind, e.amount, e.balance_after, e.reference, e.note, e.created_at)
    )
    recorded_cte, result = "", "SELECT EXISTS (SELECT FROM captured)"
    if recorded:
        u = _sql_names(UsageRecord)
        fields = _usage_record_fields()
        columns = ", ".join(getattr(u, field.attname) for field in fields)
        values = ", ".join(
            "COALESCE((SELECT amount FROM captured), 0)"
            if field.attname == "amount"
            else f"%(usage_{field.attname})s"
            for field in fields
        )
        recorded_cte = f""",
        recorded AS (
            INSERT INTO {u.table} ({columns})
            VALUES ({values})
            RETURNING {u.id} AS id, {u.amount} AS amount
        )"""  # noqa: S608 - identifiers from the models' _meta, values bound as parameters
        result = "SELECT EXISTS (SELECT FROM captured), recorded.id, recorded.amount FROM recorded"
    return f"""
        WITH captured AS (
            UPDATE {h.table} SET {h.status} = %(captured)s, {h.resolved_at} = %(now)s
            WHERE {h.id} = %(hold_id)s AND {h.status} = %(open)s
            RETURNING {h.wallet_id} AS wallet_id, {h.amount} AS amount, {h.reference} AS reference
        ),
        debited AS (
            UPDATE {w.table} SET
                {w.balance} = {w.table}.{w.balance} - captured.amount,
                {w.held} = {w.table}.{w.held} - captured.amount
            FROM captured
            WHERE {w.table}.{w.id} = captured.wallet_id AND captured.amount > 0
            RETURNING {w.table}.{w.id} AS wallet_id, {w.table}.{w.balance} AS balance_after
        ),
        charged AS (
            INSERT INTO {e.table} ({ledger_columns})
            SELECT debited.wallet_id, %(charge)s, -captured.amount, debited.balance_after,
                captured.reference, '', %(written_at)s
            FROM debited CROSS JOIN captured
        ){recorded_cte}
        {result}
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


def hold_release(*, hold: Hold, now: datetime | None = None, expired: bool = False) -> bool:
    """Void an open hold: the wallet's `held` (or the subscription's window counters) go back down.

    Exactly once: True only for the caller that moved the hold out of `open`; a hold already captured
    or released is left alone (False). `expired` marks a release by release_stale_holds. A wallet
    hold's release is one statement on PostgreSQL.
    """
    moment = now or timezone.now()
    new_status = Hold.Status.EXPIRED if expired else Hold.Status.RELEASED
    if hold.kind == Hold.Kind.WALLET and _on_postgresql():
        row = _statement_run(
            _hold_release_sql(),
            {"hold_id": hold.pk, "open": Hold.Status.OPEN, "status": new_status, "now": moment},
        )
        return bool(row and row[0])
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


@functools.cache
def _hold_release_sql() -> str:
    """Release a wallet hold as ONE statement (PostgreSQL): the status transition guarded by the old
    status (exactly one resolution per hold; a loser gets no row and gives nothing back), then `held`
    goes down by the amount with a relative update, the wallet's row lock held only inside the
    statement. The held >= 0 constraint is the backstop."""
    h, w = _sql_names(Hold), _sql_names(Wallet)
    return f"""
        WITH released AS (
            UPDATE {h.table} SET {h.status} = %(status)s, {h.resolved_at} = %(now)s
            WHERE {h.id} = %(hold_id)s AND {h.status} = %(open)s
            RETURNING {h.wallet_id} AS wallet_id, {h.amount} AS amount
        ),
        unheld AS (
            UPDATE {w.table} SET {w.held} = {w.table}.{w.held} - released.amount
            FROM released
            WHERE {w.table}.{w.id} = released.wallet_id AND released.amount > 0
        )
        SELECT EXISTS (SELECT FROM released)
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


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


def usage_record_build(
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
    """An unsaved usage record, its values cut to their columns: `usage_record_insert` saves it, or
    `hold_capture(usage_record=...)` writes it together with the charge."""
    return UsageRecord(
        request_id=request_id[:200],
        account_id=account.pk,
        credential=credential[:64],
        group_id=group.pk if group is not None else None,
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


def usage_record_insert(*, record: UsageRecord) -> UsageRecord:
    """Write a record built by `usage_record_build`."""
    record.save(force_insert=True)
    return record


def usage_record_outcome_set(*, record: UsageRecord, status: int, error_code: str, latency_ms: int) -> None:
    """A call whose usage record was written with its capture, and which failed after that (e.g. the
    response could not be stored or sent): the record now says how the call ended. Its amount stays
    what the capture charged, as the ledger has it."""
    record.status = status
    record.error_code = error_code[:100]
    record.latency_ms = max(0, latency_ms)
    record.save(update_fields=["status", "error_code", "latency_ms"])


def usage_records_purge(
    *, older_than_days: int | None = None, now: datetime | None = None, batch_size: int = 5000
) -> int:
    """Delete usage records older than the retention (GATEWAY_USAGE_RETENTION_DAYS), in batches so
    no statement locks the table for long. Returns how many were deleted."""
    days = older_than_days if older_than_days is not None else settings.GATEWAY_USAGE_RETENTION_DAYS
    cutoff = (now or timezone.now()) - timedelta(days=days)
    return queryset_delete_in_batches(
        UsageRecord.objects.filter(created_at__lt=cutoff), batch_size=batch_size
    )
