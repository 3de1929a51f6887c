from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, DecimalField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing.models import (
    Hold,
    KeyBudgetUsage,
    LedgerEntry,
    Subscription,
    SubscriptionUsage,
    UsageRecord,
    Wallet,
)
from billing.money import money_display
from billing.windows import (
    PERIOD_WINDOWS,
    TOTAL_WINDOW_START,
    local_midnight,
    window_end,
    window_start_for,
    window_starts_at,
)
from core.modelutils import MONEY


def money_exact(value: Decimal | None) -> Decimal:
    """A money sum read from the database, at the money places. PostgreSQL sums NUMERIC exactly;
    SQLite sums decimal columns in floating point (0.0998999999999999 for 0.0999), so round back."""
    return (value if value is not None else Decimal("0")).quantize(settings.MONEY_QUANTUM)


def subscription_get_active(
    *, account_id: int, group_id: int, at: datetime | None = None
) -> Subscription | None:
    """The account's subscription for the group if it has started and not expired at `at` (now)."""
    moment = at or timezone.now()
    return (
        Subscription.objects.filter(account_id=account_id, group_id=group_id, starts_at__lte=moment)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=moment))
        .first()
    )


@dataclass(frozen=True)
class KeyBudgetWindow:
    """An API key's budget window now: its calendar window, when it started and ends (None: the
    total window never ends), the budget and what it has used (calls in flight included)."""

    period: str
    window: str
    start: datetime
    ends_at: datetime | None
    budget: Decimal
    used: Decimal

    @property
    def remaining(self) -> Decimal:
        return max(self.budget - self.used, Decimal(0))


def api_key_budget_window_get(
    *, api_key_id: int, budget: Decimal | None, budget_period: str, now: datetime | None = None
) -> KeyBudgetWindow | None:
    """The key's current budget window and its spend; None for a key without a budget."""
    if budget is None or not budget_period:
        return None
    window = PERIOD_WINDOWS[budget_period]
    start = window_start_for(window=window, moment=now or timezone.now())
    used = (
        KeyBudgetUsage.objects.filter(api_key_id=api_key_id, window=window, window_start=start)
        .values_list("used", flat=True)
        .first()
    )
    return KeyBudgetWindow(
        period=budget_period,
        window=window,
        start=local_midnight(start),
        ends_at=window_end(window=window, start=start),
        budget=budget,
        used=money_exact(used),
    )


# How each budget period's current window is named to people.
PERIOD_PHRASES = {"daily": "today", "weekly": "this week", "monthly": "this month", "total": "in total"}


def key_budget_window_summary(window: KeyBudgetWindow) -> str:
    """The window for people, as the console and the admin show it beside the key: "¥1.20 of ¥5.00
    this month, resets 1 Dec" (a total budget never resets)."""
    text = f"{money_display(window.used)} of {money_display(window.budget)} {PERIOD_PHRASES[window.period]}"
    if window.ends_at is not None:
        text += f", resets {window.ends_at.day} {window.ends_at:%b}"
    return text


TOKEN_COLUMNS = ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens")


@dataclass(frozen=True)
class UsageTotals:
    """An account's usage in one period: successful calls, what its calls cost (charged to the
    balance or counted against a subscription), and the tokens of its text calls."""

    calls: int
    amount: Decimal
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class UsagePeriods:
    today: UsageTotals
    this_month: UsageTotals


def usage_totals_get(*, account_id: int, now: datetime | None = None) -> UsagePeriods:
    """The account's usage today and this month, as local days and months in GATEWAY_TIMEZONE (the
    caps' windows), read with one query over the month's usage records.

    `calls` counts the calls that succeeded (2xx) in a billed group; `amount` and the tokens sum every
    record, so a call charged and then failed (its answer lost) still counts what it cost.
    """
    starts = window_starts_at(moment=now or timezone.now())
    today = Q(
        created_at__gte=local_midnight(starts.day),
        created_at__lt=window_end(window="day", start=starts.day),
    )
    succeeded = Q(status__gte=200, status__lt=300) & ~Q(billing="")
    sums: dict[str, Count | Sum] = {}
    for period, within in (("today", today), ("this_month", Q())):  # the query reads the month only
        sums[f"{period}_calls"] = Count("pk", filter=succeeded & within)
        for column in ("amount", *TOKEN_COLUMNS):
            sums[f"{period}_{column}"] = Sum(column, filter=within)
    row = UsageRecord.objects.filter(
        account_id=account_id,
        created_at__gte=local_midnight(starts.month),
        created_at__lt=window_end(window="month", start=starts.month),
    ).aggregate(**sums)

    def totals(period: str) -> UsageTotals:
        return UsageTotals(
            calls=row[f"{period}_calls"],
            amount=money_exact(row[f"{period}_amount"]),
            **{column: row[f"{period}_{column}"] or 0 for column in TOKEN_COLUMNS},
        )

    return UsagePeriods(today=totals("today"), this_month=totals("this_month"))


@dataclass(frozen=True)
class LedgerProblem:
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"


def ledger_check() -> list[LedgerProblem]:
    """Every broken billing invariant, read from one consistent snapshot of the database.

    For every wallet: balance = sum of its ledger entries = the last entry's balance_after;
    held = sum of its open holds; available = balance - held >= 0. For every subscription counter
    and every API key's budget window: used = sum of its open and captured holds in that window, and
    used >= 0.
    """
    with transaction.atomic():
        if connection.vendor == "postgresql" and len(connection.atomic_blocks) == 1:
            # One snapshot for all the queries below, so money moving meanwhile cannot look like a
            # broken invariant. Must be the transaction's first statement (not possible when nested).
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _wallet_problems() + _subscription_usage_problems() + _key_budget_usage_problems()


def _wallet_problems() -> list[LedgerProblem]:
    money = DecimalField(**MONEY)
    zero = Value(Decimal("0"), output_field=money)
    entries_sum = (
        LedgerEntry.objects.filter(wallet=OuterRef("pk"))
        .values("wallet")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    open_holds = (
        Hold.objects.filter(wallet=OuterRef("pk"), status=Hold.Status.OPEN)
        .values("wallet")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    last_after = LedgerEntry.objects.filter(wallet=OuterRef("pk")).order_by("-pk").values("balance_after")[:1]
    wallets = Wallet.objects.select_related("account__user").annotate(
        ledger_sum=Coalesce(Subquery(entries_sum, output_field=money), zero),
        open_held=Coalesce(Subquery(open_holds, output_field=money), zero),
        last_balance_after=Subquery(last_after, output_field=money),
    )
    problems = []
    for wallet in wallets.order_by("pk"):
        subject = f"wallet #{wallet.pk} ({wallet.account})"
        wallet.ledger_sum, wallet.open_held = money_exact(wallet.ledger_sum), money_exact(wallet.open_held)
        balance, held = money_display(wallet.balance), money_display(wallet.held)
        if wallet.balance != wallet.ledger_sum:
            problems.append(
                LedgerProblem(
                    subject, f"balance {balance} != sum of ledger entries {money_display(wallet.ledger_sum)}"
                )
            )
        if wallet.last_balance_after is not None and wallet.last_balance_after != wallet.balance:
            last = money_display(wallet.last_balance_after)
            problems.append(
                LedgerProblem(subject, f"balance {balance} != the last entry's balance_after {last}")
            )
        if wallet.held != wallet.open_held:
            problems.append(
                LedgerProblem(subject, f"held {held} != sum of open holds {money_display(wallet.open_held)}")
            )
        if wallet.balance - wallet.held < 0:
            available = money_display(wallet.balance - wallet.held)
            problems.append(LedgerProblem(subject, f"available balance {available} is negative"))
    return problems


def _subscription_usage_problems() -> list[LedgerProblem]:
    counted = (Hold.Status.OPEN, Hold.Status.CAPTURED)
    holds = Hold.objects.filter(kind=Hold.Kind.SUBSCRIPTION, status__in=counted)
    # An open hold counts its amount; a captured one what its capture kept (a per-token call gives
    # the rest back).
    counted_amount = Coalesce("captured_amount", "amount")
    expected: dict[tuple[int, str, object], Decimal] = {}
    for window, start_field in (("day", "day_start"), ("week", "week_start"), ("month", "month_start")):
        for row in holds.values("subscription_id", start_field).annotate(total=Sum(counted_amount)):
            expected[(row["subscription_id"], window, row[start_field])] = money_exact(row["total"])
    for row in holds.values("subscription_id").annotate(total=Sum(counted_amount)):
        expected[(row["subscription_id"], "total", TOTAL_WINDOW_START)] = money_exact(row["total"])
    problems = []
    seen = set()
    for usage in SubscriptionUsage.objects.order_by("pk"):
        identity = (usage.subscription_id, usage.window, usage.window_start)
        seen.add(identity)
        want = expected.get(identity, Decimal("0"))
        if usage.used != want or usage.used < 0:
            problems.append(
                LedgerProblem(
                    f"subscription #{usage.subscription_id} {usage.window} window from {usage.window_start}",
                    f"used {money_display(usage.used)} != sum of its open and captured holds "
                    f"{money_display(want)}",
                )
            )
    for counted_in, want in expected.items():
        if counted_in not in seen and want != 0:
            problems.append(
                LedgerProblem(
                    f"subscription #{counted_in[0]} {counted_in[1]} window from {counted_in[2]}",
                    f"no usage counter, but holds of {money_display(want)} count in it",
                )
            )
    return problems


def _key_budget_usage_problems() -> list[LedgerProblem]:
    counted = (Hold.Status.OPEN, Hold.Status.CAPTURED)
    holds = Hold.objects.filter(api_key__isnull=False, status__in=counted).exclude(key_window="")
    expected: dict[tuple[int, str, object], Decimal] = {
        (row["api_key_id"], row["key_window"], row["key_window_start"]): money_exact(row["total"])
        for row in holds.values("api_key_id", "key_window", "key_window_start").annotate(
            total=Sum(Coalesce("captured_amount", "amount"))
        )
    }
    problems = []
    for usage in KeyBudgetUsage.objects.order_by("pk"):
        identity = (usage.api_key_id, usage.window, usage.window_start)
        want = expected.pop(identity, Decimal("0"))
        if usage.used != want or usage.used < 0:
            problems.append(
                LedgerProblem(
                    f"API key #{usage.api_key_id} budget {usage.window} window from {usage.window_start}",
                    f"used {money_display(usage.used)} != sum of its open and captured holds "
                    f"{money_display(want)}",
                )
            )
    for (api_key_id, window, start), want in expected.items():
        if want != 0:
            problems.append(
                LedgerProblem(
                    f"API key #{api_key_id} budget {window} window from {start}",
                    f"no usage counter, but holds of {money_display(want)} count in it",
                )
            )
    return problems


def wallet_available_get(*, account_id: int) -> Decimal:
    """The account's available balance (balance - held) as last committed; 0 without a wallet.

    For cheap refusals before expensive work only: another call may reserve in between, so the
    reservation's conditional UPDATE (billing.holds.hold_reserve) stays the guarantee."""
    row = Wallet.objects.filter(account_id=account_id).values_list("balance", "held").first()
    if row is None:
        return money_exact(None)
    balance, held = row
    return money_exact(balance - held)


@dataclass(frozen=True)
class OpenHolds:
    kind: str  # Hold.Kind: wallet or subscription
    count: int
    amount: Decimal


def holds_open_totals() -> list[OpenHolds]:
    """The open holds and the amount they reserve, by kind: one aggregate query for the metrics
    scrape. Open holds are the calls in flight (plus any a dead worker left until
    release_stale_holds), and the partial index on open holds lets PostgreSQL find only those."""
    rows = (
        Hold.objects.filter(status=Hold.Status.OPEN)
        .values("kind")
        .annotate(count=Count("pk"), amount=Sum("amount"))
        .order_by("kind")
    )
    return [
        OpenHolds(kind=row["kind"], count=row["count"], amount=money_exact(row["amount"])) for row in rows
    ]


def usage_totals_between(*, account_id: int, start: datetime, end: datetime) -> UsageTotals:
    """The account's usage from `start` (inclusive) to `end` (exclusive), counted as usage_totals_get
    counts a period."""
    succeeded = Q(status__gte=200, status__lt=300) & ~Q(billing="")
    row = UsageRecord.objects.filter(
        account_id=account_id, created_at__gte=start, created_at__lt=end
    ).aggregate(
        calls=Count("pk", filter=succeeded),
        amount=Sum("amount"),
        **{column: Sum(column) for column in TOKEN_COLUMNS},
    )
    return UsageTotals(
        calls=row["calls"],
        amount=money_exact(row["amount"]),
        **{column: row[column] or 0 for column in TOKEN_COLUMNS},
    )


def usage_records_page(
    *, account_id: int, start: datetime, end: datetime, limit: int, before_id: int | None = None
) -> tuple[list[UsageRecord], bool]:
    """One page of the account's usage records in [start, end), newest first, and whether more
    follow; `before_id` continues after the previous page's last record. Ordered by id, the order
    they were logged in (a stable cursor, unlike `created_at`, which several records can share)."""
    records = UsageRecord.objects.filter(account_id=account_id, created_at__gte=start, created_at__lt=end)
    if before_id is not None:
        records = records.filter(pk__lt=before_id)
    page = list(records.order_by("-pk")[: limit + 1])
    return page[:limit], len(page) > limit
