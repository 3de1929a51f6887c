"""Detecting that a charge crossed a line, and writing the event into the outbox in the same
transaction as the charge.

The lines: the account's balance floor (a wallet charge), and the percentages of the subscription's
caps (a subscription call) and of the key's budget (a key with a budget). Every counter read here
counts calls in flight: the available balance is the balance less what open holds reserve, and a cap's
or budget's window counts open holds until they are captured or released.

The capture of a call (api/metering.py) asks `charge_watch` what its charge could cross, from
the per-process cached thresholds: None (no query, the capture runs as it always does) when there is
no line. Otherwise `charge_crossing_possible` reads the counters once, with whether each line has
already emitted in its window; only when a line is reached and not yet emitted does the capture run
inside `transaction.atomic` with `charge_alerts_write` after it, which reads the counters again
(the wallet row locked by the capture: exact) and inserts each reached line's event with ON CONFLICT
DO NOTHING on its (account, kind, subject, threshold, window): of concurrent captures crossing the same
line, one row is written.

Why a read before the capture is enough to skip the transaction: the counters only grow through
reservations, and every reservation is followed by its own capture's read. Whatever counts a line as
reached once the calls have settled was already counted (in full, as an open hold) when the last of
those captures read it, so that capture takes the transactional path and writes the event.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import CharField, DecimalField, F, Q, QuerySet, Subquery, Value
from django.db.models.functions import Cast

from billing.models import Hold, KeyBudgetUsage, LedgerEntry, SubscriptionUsage, Wallet
from billing.money import money_str
from billing.statements import on_postgresql, sql_names, statement_run
from billing.windows import PERIOD_WINDOWS, TOTAL_WINDOW_START, window_end
from core.modelutils import MONEY
from notifications.models import AlertSettings, Notification
from notifications.thresholds import alert_thresholds_get

logger = logging.getLogger("gateway.notifications")

WINDOW_PERIODS = {window: period for period, window in PERIOD_WINDOWS.items()}
FLOOR_SUBJECT = "balance"
# The pre-read's row tags for the counters; the events already written come back under their subject.
AVAILABLE, EPOCH, KEY = "available", "epoch", "key"


@dataclass(frozen=True)
class CapWindow:
    """A counted window with a limit: a subscription cap's or a key budget's."""

    window: str  # day, week, month, total
    start: date
    limit: Decimal


@dataclass(frozen=True)
class ChargeWatch:
    """The lines one capture could cross."""

    account_id: int
    percentages: tuple[int, ...]
    floor: Decimal | None = None
    subscription_id: int | None = None
    caps: tuple[CapWindow, ...] = ()
    api_key_id: int | None = None
    budget: CapWindow | None = None


def charge_watch(
    *,
    account_id: int,
    hold: Hold,
    subscription_caps: dict[str, Decimal | None] | None = None,
    key_budget: Decimal | None = None,
) -> ChargeWatch | None:
    """What the capture of `hold` could cross, from the cached thresholds (no query); None when
    nothing. `subscription_caps`: the subscription's cap per window (day, week, month, total) for a
    subscription hold; `key_budget`: the key's budget when the hold counts in its window."""
    thresholds = alert_thresholds_get(account_id=account_id)
    floor = thresholds.balance_floor if hold.kind == Hold.Kind.WALLET else None
    caps: tuple[CapWindow, ...] = ()
    if hold.kind == Hold.Kind.SUBSCRIPTION and subscription_caps and thresholds.percentages:
        starts = {
            "day": hold.day_start,
            "week": hold.week_start,
            "month": hold.month_start,
            "total": TOTAL_WINDOW_START,
        }
        caps = tuple(
            CapWindow(window=window, start=start, limit=cap)
            for window, start in starts.items()
            if start is not None and (cap := subscription_caps.get(window)) is not None and cap > 0
        )
    budget = None
    if (
        hold.api_key_id is not None
        and hold.key_window
        and hold.key_window_start is not None
        and key_budget is not None
        and key_budget > 0
        and thresholds.percentages
    ):
        budget = CapWindow(window=hold.key_window, start=hold.key_window_start, limit=key_budget)
    if floor is None and not caps and budget is None:
        return None
    return ChargeWatch(
        account_id=account_id,
        percentages=thresholds.percentages,
        floor=floor,
        subscription_id=hold.subscription_id if caps else None,
        caps=caps,
        api_key_id=hold.api_key_id if budget is not None else None,
        budget=budget,
    )


@dataclass(frozen=True)
class _Line:
    """One threshold of one counter, in one window."""

    kind: str
    subject: str
    threshold: Decimal
    window: str
    reached: bool
    payload: dict[str, Any]


def charge_crossing_possible(*, watch: ChargeWatch) -> bool:
    """Whether a line of the watch is reached and has not emitted in its window yet (one query)."""
    return any(line.reached for line in _lines(watch=watch, emitted_skipped=True))


def charge_alerts_write(*, watch: ChargeWatch, now: datetime) -> int:
    """Inside the capture's transaction, after the charge: write the event of every reached line
    (ON CONFLICT DO NOTHING: once per line and window however many captures race). Returns how many
    lines were reached (written now or before)."""
    reached = [line for line in _lines(watch=watch, emitted_skipped=False) if line.reached]
    if reached:
        Notification.objects.bulk_create(
            [
                Notification(
                    event_id=f"evt_{uuid.uuid4().hex}",
                    account_id=watch.account_id,
                    kind=line.kind,
                    subject=line.subject,
                    threshold=line.threshold,
                    window=line.window,
                    payload=line.payload,
                    created_at=now,
                    next_attempt_at=now,
                )
                for line in reached
            ],
            ignore_conflicts=True,
        )
    return len(reached)


def _lines(*, watch: ChargeWatch, emitted_skipped: bool) -> list[_Line]:
    """Every line of the watch with whether it is reached now; with `emitted_skipped`, a line whose
    event exists in its window counts as not reached (nothing left to write)."""
    rows = _counters_read(watch=watch)
    counters = {tag: (at, value) for tag, at, value in rows if tag in (AVAILABLE, EPOCH, KEY, *_WINDOWS)}
    emitted = {(tag, at, _money(value)) for tag, at, value in rows if tag not in counters}
    lines: list[_Line] = []
    if watch.floor is not None and AVAILABLE in counters:
        available = _money(counters[AVAILABLE][1])
        epoch = counters[EPOCH][0] if EPOCH in counters else "0"
        lines.append(
            _Line(
                kind=Notification.Kind.BALANCE_FLOOR,
                subject=FLOOR_SUBJECT,
                threshold=watch.floor,
                window=epoch,
                reached=available < watch.floor,
                payload={"floor": money_str(watch.floor), "available_balance": money_str(available)},
            )
        )
    for cap in watch.caps:
        used = _money(counters[cap.window][1]) if cap.window in counters else Decimal(0)
        subject = f"subscription:{watch.subscription_id}:{cap.window}"
        lines.extend(
            _percentage_lines(
                watch=watch,
                kind=Notification.Kind.SUBSCRIPTION_CAP,
                subject=subject,
                cap=cap,
                used=used,
                data={"subscription": watch.subscription_id, "period": WINDOW_PERIODS[cap.window]},
            )
        )
    if watch.budget is not None:
        used = _money(counters[KEY][1]) if KEY in counters else Decimal(0)
        lines.extend(
            _percentage_lines(
                watch=watch,
                kind=Notification.Kind.KEY_BUDGET,
                subject=f"key:{watch.api_key_id}",
                cap=watch.budget,
                used=used,
                data={"api_key": watch.api_key_id, "budget_period": WINDOW_PERIODS[watch.budget.window]},
            )
        )
    if emitted_skipped:
        lines = [line for line in lines if (line.subject, line.window, line.threshold) not in emitted]
    return lines


_WINDOWS = ("day", "week", "month", "total")


def _percentage_lines(
    *, watch: ChargeWatch, kind: str, subject: str, cap: CapWindow, used: Decimal, data: dict[str, Any]
) -> list[_Line]:
    ends = window_end(window=cap.window, start=cap.start)
    limit_name = "cap" if kind == Notification.Kind.SUBSCRIPTION_CAP else "budget"
    base = {
        **data,
        limit_name: money_str(cap.limit),
        "used": money_str(used),
        "window_start": cap.start.isoformat(),
        "window_ends_at": ends.isoformat() if ends is not None else None,
    }
    return [
        _Line(
            kind=kind,
            subject=subject,
            threshold=Decimal(percentage),
            window=cap.start.isoformat(),
            reached=used * 100 >= cap.limit * percentage,
            payload={**base, "percentage": percentage},
        )
        for percentage in watch.percentages
    ]


def _counters_read(*, watch: ChargeWatch) -> list[tuple[str, str, Any]]:
    """One query: each counter the watch needs as (tag, window or epoch, value), and the events
    already written for its lines as (subject, window, threshold). On PostgreSQL one prepared
    statement run as the billing statements are (`_counters_read_statement`); elsewhere (SQLite) the
    ORM's union of the same reads."""
    if on_postgresql():
        return _counters_read_statement(watch=watch)
    return _counters_read_orm(watch=watch)


@functools.cache
def counters_read_sql(*, floor: bool, windows: tuple[str, ...], key: bool) -> str:
    """The PostgreSQL form of the counters' read, for one shape of watch: one row of scalar
    subqueries (the available balance and the floor's arming; each capped window's use; the key's
    window's use) and the array of the events already written for the watch's lines. Identifiers
    come from the models' _meta (`sql_names`), every value is a bound parameter."""
    w, a, u = sql_names(Wallet), sql_names(AlertSettings), sql_names(SubscriptionUsage)
    k, n = sql_names(KeyBudgetUsage), sql_names(Notification)
    epoch = f"(SELECT {a.floor_epoch}::text FROM {a.table} WHERE {a.account_id} = %(account_id)s)"  # noqa: S608
    available = f"(SELECT {w.balance} - {w.held} FROM {w.table} WHERE {w.account_id} = %(account_id)s)"  # noqa: S608
    columns, emitted = [], []
    if floor:
        columns += [available, epoch]
        emitted.append(
            f"({n.kind} = %(floor_kind)s AND {n.subject} = %(floor_subject)s"
            f" AND {n.threshold} = %(floor)s AND {n.window} = {epoch})"
        )
    for window in windows:
        used = f"SELECT {u.used} FROM {u.table} WHERE {u.subscription_id} = %(subscription_id)s"  # noqa: S608
        columns.append(
            f"({used} AND {u.window} = %({window}_window)s AND {u.window_start} = %({window}_start)s)"
        )
        emitted.append(
            f"({n.kind} = %(cap_kind)s AND {n.subject} = %({window}_subject)s"
            f" AND {n.window} = %({window}_start)s::text)"
        )
    if key:
        used = f"SELECT {k.used} FROM {k.table} WHERE {k.api_key_id} = %(api_key_id)s"  # noqa: S608
        columns.append(f"({used} AND {k.window} = %(key_window)s AND {k.window_start} = %(key_start)s)")
        emitted.append(
            f"({n.kind} = %(key_kind)s AND {n.subject} = %(key_subject)s"
            f" AND {n.window} = %(key_start)s::text)"
        )
    written = f"{n.subject} || ' ' || {n.window} || ' ' || {n.threshold}::text"
    columns.append(
        f"ARRAY(SELECT {written} FROM {n.table}"  # noqa: S608
        f" WHERE {n.account_id} = %(account_id)s AND ({' OR '.join(emitted)}))"
    )
    return "SELECT " + ", ".join(columns)


def _counters_read_statement(*, watch: ChargeWatch) -> list[tuple[str, str, Any]]:
    windows = tuple(cap.window for cap in watch.caps)
    params: dict[str, Any] = {"account_id": watch.account_id}
    if watch.floor is not None:
        params.update(
            floor=watch.floor, floor_kind=Notification.Kind.BALANCE_FLOOR, floor_subject=FLOOR_SUBJECT
        )
    for cap in watch.caps:
        params[f"{cap.window}_window"] = cap.window
        params[f"{cap.window}_start"] = cap.start
        params[f"{cap.window}_subject"] = f"subscription:{watch.subscription_id}:{cap.window}"
    if watch.caps:
        params.update(subscription_id=watch.subscription_id, cap_kind=Notification.Kind.SUBSCRIPTION_CAP)
    if watch.budget is not None:
        params.update(
            api_key_id=watch.api_key_id,
            key_window=watch.budget.window,
            key_start=watch.budget.start,
            key_kind=Notification.Kind.KEY_BUDGET,
            key_subject=f"key:{watch.api_key_id}",
        )
    sql = counters_read_sql(floor=watch.floor is not None, windows=windows, key=watch.budget is not None)
    row = statement_run(sql, params)
    assert row is not None  # a SELECT without FROM always returns its one row
    values = list(row)
    rows: list[tuple[str, str, Any]] = []
    if watch.floor is not None:
        available, epoch = values.pop(0), values.pop(0)
        if available is not None:
            rows.append((AVAILABLE, "", available))
        if epoch is not None:
            rows.append((EPOCH, epoch, None))
    for cap in watch.caps:
        used = values.pop(0)
        if used is not None:
            rows.append((cap.window, cap.start.isoformat(), used))
    if watch.budget is not None:
        used = values.pop(0)
        if used is not None:
            rows.append((KEY, watch.budget.start.isoformat(), used))
    for written in values.pop(0):
        subject, window, threshold = written.split(" ")
        rows.append((subject, window, Decimal(threshold)))
    return rows


def _counters_read_orm(*, watch: ChargeWatch) -> list[tuple[str, str, Any]]:
    text, money = CharField(), DecimalField(**MONEY)
    parts: list[QuerySet[Any, Any]] = []
    emitted = Q()
    if watch.floor is not None:
        parts.append(
            Wallet.objects.filter(account_id=watch.account_id).annotate(
                tag=Value(AVAILABLE, output_field=text),
                at=Value("", output_field=text),
                value=F("balance") - F("held"),
            )
        )
        epoch = AlertSettings.objects.filter(account_id=watch.account_id)
        parts.append(
            epoch.annotate(
                tag=Value(EPOCH, output_field=text),
                at=Cast("floor_epoch", output_field=text),
                value=Value(None, output_field=money),
            )
        )
        emitted |= Q(
            kind=Notification.Kind.BALANCE_FLOOR,
            subject=FLOOR_SUBJECT,
            threshold=watch.floor,
            window=Subquery(epoch.annotate(at=Cast("floor_epoch", output_field=text)).values("at")[:1]),
        )
    if watch.caps and watch.subscription_id is not None:
        in_windows = Q()
        for cap in watch.caps:
            in_windows |= Q(window=cap.window, window_start=cap.start)
            emitted |= Q(
                kind=Notification.Kind.SUBSCRIPTION_CAP,
                subject=f"subscription:{watch.subscription_id}:{cap.window}",
                window=cap.start.isoformat(),
            )
        parts.append(
            SubscriptionUsage.objects.filter(in_windows, subscription_id=watch.subscription_id).annotate(
                tag=F("window"), at=Cast("window_start", output_field=text), value=F("used")
            )
        )
    if watch.budget is not None and watch.api_key_id is not None:
        parts.append(
            KeyBudgetUsage.objects.filter(
                api_key_id=watch.api_key_id, window=watch.budget.window, window_start=watch.budget.start
            ).annotate(
                tag=Value(KEY, output_field=text),
                at=Cast("window_start", output_field=text),
                value=F("used"),
            )
        )
        emitted |= Q(
            kind=Notification.Kind.KEY_BUDGET,
            subject=f"key:{watch.api_key_id}",
            window=watch.budget.start.isoformat(),
        )
    parts.append(
        Notification.objects.filter(emitted, account_id=watch.account_id).annotate(
            tag=F("subject"), at=F("window"), value=F("threshold")
        )
    )
    first, *others = (part.order_by().values_list("tag", "at", "value") for part in parts)
    return list(first.union(*others, all=True))


def _money(value: Any) -> Decimal:
    """A money value as the union read it (SQLite computes decimal columns in floating point)."""
    return Decimal(str(value)).quantize(Decimal(1).scaleb(-MONEY["decimal_places"]))


def balance_floor_rearm(*, instance: LedgerEntry, created: bool, **_: Any) -> None:
    """Receiver of a ledger entry's post_save: a top-up or adjustment that leaves the available
    balance at or above the account's floor re-arms it (a new window for its event). Charges never
    re-arm, and nothing here emits."""
    if not created or instance.kind == LedgerEntry.Kind.CHARGE:
        return
    wallet = Wallet.objects.filter(pk=instance.wallet_id).values_list("account_id", "held").first()
    if wallet is None:
        return
    account_id, held = wallet
    if alert_thresholds_get(account_id=account_id).balance_floor is None:
        return
    # The ledger entry's transaction holds the wallet's row lock: balance_after - held is exact.
    AlertSettings.objects.filter(
        account_id=account_id, balance_floor__isnull=False, balance_floor__lte=instance.balance_after - held
    ).update(floor_epoch=F("floor_epoch") + 1)


def capture_with_alerts(
    *,
    account_id: int,
    hold: Hold,
    subscription_caps: dict[str, Decimal | None] | None,
    key_budget: Decimal | None,
    capture: Callable[[], bool],
    now: datetime,
) -> bool:
    """Run `capture()` (the capture of `hold`, True when it charged) and write the events of the
    lines it crossed in the same transaction (`charge_watch` says what it could cross). Without a
    line, or when the one read says none can be newly reached, the capture runs alone, as it always
    does. A served call is charged whatever its alerts: a database error while reading the lines
    runs the capture alone, and an event that cannot be written leaves the charge standing; both
    are logged."""
    try:
        watch = charge_watch(
            account_id=account_id, hold=hold, subscription_caps=subscription_caps, key_budget=key_budget
        )
        crossing = watch is not None and charge_crossing_possible(watch=watch)
    except DatabaseError:
        # The capture's own statement reconnects after a restart of PostgreSQL (statement_run).
        logger.exception("could not read the alert lines of request %s; capturing without", hold.reference)
        watch, crossing = None, False
    if watch is None or not crossing:
        return capture()
    with transaction.atomic():
        captured = capture()
        if captured:
            try:
                with transaction.atomic():  # a savepoint: a refused insert leaves the charge standing
                    charge_alerts_write(watch=watch, now=now)
            except DatabaseError:
                logger.exception("could not write the alerts of request %s", hold.reference)
    return captured
