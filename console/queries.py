"""Read-only queries behind the web console's pages.

Every function takes the signed-in user's account and reads only what belongs to it: an id that is not
the account's is simply not found, so guessing ids shows nothing of another account. Writes go through
the owning app's services (keys.services), never through this module.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import OuterRef, Q, Subquery, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, RefreshToken
from oauth2_provider.settings import oauth2_settings

from accounts.models import Account, User
from api.catalog import group_model_ids
from billing.models import (
    Hold,
    IdempotencyRecord,
    LedgerEntry,
    Subscription,
    SubscriptionUsage,
    UsageRecord,
    Wallet,
)
from billing.money import money_display
from billing.selectors import api_key_budget_window_get, key_budget_window_summary
from billing.windows import TOTAL_WINDOW_START, window_end, window_starts_at
from chat.selectors import group_text_models_enabled
from groups.models import Group
from images.models import HostedImage, ImageModel
from keys.models import ApiKey

SPEND_DAYS = 30
LATEST_CALLS = 20
# Windows in the order the overview shows them, with the Subscription field holding each cap.
CAP_WINDOWS = (
    (SubscriptionUsage.Window.DAY, "daily_limit", "Today"),
    (SubscriptionUsage.Window.WEEK, "weekly_limit", "This week"),
    (SubscriptionUsage.Window.MONTH, "monthly_limit", "This month"),
    (SubscriptionUsage.Window.TOTAL, "total_limit", "In total"),
)


def account_for_user(*, user: User) -> Account | None:
    """The signed-in user's account with its groups and wallet, or None (e.g. a bare superuser)."""
    return (
        Account.objects.select_related("user", "current_group", "wallet")
        .prefetch_related("allowed_groups")
        .filter(user=user)
        .first()
    )


# --- API keys ----------------------------------------------------------------------------------------


def api_keys_for_account(*, account: Account) -> list[ApiKey]:
    return list(ApiKey.objects.filter(account=account).select_related("group").order_by("-created_at", "-id"))


def api_key_for_account(*, account: Account, api_key_id: int) -> ApiKey | None:
    """The account's key with this id; None for another account's key, exactly as for a missing one."""
    return ApiKey.objects.filter(account=account, pk=api_key_id).select_related("group").first()


@dataclass(frozen=True)
class KeyRow:
    """A key as the keys page lists it: its budget's current window in words ("¥1.20 of ¥5.00 this
    month, resets 1 Dec"; empty without a budget) and its other limits, each in a few words."""

    api_key: ApiKey
    budget: str
    limits: list[str]


def key_rows(*, api_keys: list[ApiKey], now: datetime | None = None) -> list[KeyRow]:
    """The keys with their limits and the spend of each budget's current window (calls in flight
    included, as the reserve step counts them)."""
    moment = now or timezone.now()
    rows = []
    for api_key in api_keys:
        window = api_key_budget_window_get(
            api_key_id=api_key.pk, budget=api_key.budget, budget_period=api_key.budget_period, now=moment
        )
        limits = []
        if api_key.rpm is not None:
            limits.append(f"{api_key.rpm:,} requests a minute")
        if api_key.tpm is not None:
            limits.append(f"{api_key.tpm:,} tokens a minute")
        if api_key.model_ids:
            limits.append(f"Models: {', '.join(api_key.model_ids)}")
        if api_key.allowed_ips:
            limits.append(f"From: {', '.join(api_key.allowed_ips)}")
        rows.append(
            KeyRow(
                api_key=api_key,
                budget=key_budget_window_summary(window) if window is not None else "",
                limits=limits,
            )
        )
    return rows


def key_group_models(*, groups: list[Group]) -> list[tuple[str, list[str]]]:
    """Each group's enabled model ids (what a key of the group may list in its `models`)."""
    return [(group.name, sorted(group_model_ids(group_id=group.pk))) for group in groups]


def key_groups_for_account(*, account: Account) -> list[Group]:
    """The groups a new key may be bound to: the account's allowed groups that are active."""
    return list(account.allowed_groups.filter(status=Group.Status.ACTIVE).order_by("pk"))


# --- Overview ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WalletState:
    balance: Decimal
    held: Decimal
    open_holds: int

    @property
    def available(self) -> Decimal:
        return self.balance - self.held

    @property
    def shown(self) -> dict[str, str]:
        return {
            "balance": money_display(self.balance),
            "held": money_display(self.held),
            "available": money_display(self.available),
        }


@dataclass(frozen=True)
class CapUsage:
    label: str
    used: Decimal
    cap: Decimal
    resets_at: datetime | None

    @property
    def percent(self) -> int:
        if self.cap <= 0:
            return 100
        return min(100, int(self.used * 100 / self.cap))

    @property
    def used_shown(self) -> str:
        return money_display(self.used)

    @property
    def cap_shown(self) -> str:
        return money_display(self.cap)


@dataclass(frozen=True)
class SubscriptionState:
    subscription: Subscription
    state: str  # "active", "not started" or "expired"
    caps: list[CapUsage]


@dataclass(frozen=True)
class SpendDay:
    day: date
    amount: Decimal


def wallet_state_for_account(*, account: Account) -> WalletState:
    wallet = Wallet.objects.filter(account=account).first()
    if wallet is None:
        return WalletState(balance=Decimal(0), held=Decimal(0), open_holds=0)
    open_holds = Hold.objects.filter(
        Q(wallet=wallet) | Q(subscription__account=account), status=Hold.Status.OPEN
    ).count()
    return WalletState(balance=wallet.balance, held=wallet.held, open_holds=open_holds)


def subscriptions_for_account(*, account: Account, now: datetime | None = None) -> list[SubscriptionState]:
    """Each subscription with how much of each of its caps the current window has used.

    Counters include open holds (quota reserved by calls in flight), as the reserve step counts them.
    """
    moment = now or timezone.now()
    starts = window_starts_at(moment=moment)
    window_start = {
        SubscriptionUsage.Window.DAY: starts.day,
        SubscriptionUsage.Window.WEEK: starts.week,
        SubscriptionUsage.Window.MONTH: starts.month,
        SubscriptionUsage.Window.TOTAL: TOTAL_WINDOW_START,
    }
    subscriptions = list(
        Subscription.objects.filter(account=account).select_related("group").order_by("group_id")
    )
    wanted = Q(pk__in=[])
    for window, start in window_start.items():
        wanted |= Q(window=window, window_start=start)
    used = {
        (row.subscription_id, row.window): row.used
        for row in SubscriptionUsage.objects.filter(wanted, subscription__in=subscriptions)
    }
    states = []
    for subscription in subscriptions:
        caps = []
        for window, field, label in CAP_WINDOWS:
            cap = getattr(subscription, field)
            if cap is None:
                continue
            start = window_start[window]
            caps.append(
                CapUsage(
                    label=label,
                    used=used.get((subscription.pk, window), Decimal(0)),
                    cap=cap,
                    resets_at=window_end(window=window, start=start),
                )
            )
        if subscription.starts_at > moment:
            state = "not started"
        elif subscription.expires_at is not None and subscription.expires_at <= moment:
            state = "expired"
        else:
            state = "active"
        states.append(SubscriptionState(subscription=subscription, state=state, caps=caps))
    return states


def spend_per_day_for_account(*, account: Account, now: datetime | None = None) -> list[SpendDay]:
    """Wallet charges per local day (GATEWAY_TIMEZONE) for the last SPEND_DAYS days, oldest first,
    every day present (0 when nothing was charged)."""
    zone = ZoneInfo(settings.GATEWAY_TIMEZONE)
    today = (now or timezone.now()).astimezone(zone).date()
    first = today - timedelta(days=SPEND_DAYS - 1)
    rows = (
        LedgerEntry.objects.filter(
            wallet__account=account,
            kind=LedgerEntry.Kind.CHARGE,
            created_at__gte=datetime.combine(first, time.min, tzinfo=zone),
        )
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .values("day")
        .annotate(total=Sum("amount"))
    )
    # Charges are stored negative; spend is shown positive.
    totals = {row["day"]: -row["total"] for row in rows}
    return [
        SpendDay(day=day, amount=totals.get(day, Decimal(0)))
        for day in (first + timedelta(days=offset) for offset in range(SPEND_DAYS))
    ]


@dataclass(frozen=True)
class CallRow:
    record: UsageRecord
    via: str
    amount: str
    tokens: str = ""  # a text call's tokens in short ("1,234 in · 56 out"); empty for an image call
    tokens_title: str = ""  # every count, named in full
    via_short: str = ""  # what a narrow column shows of `via`: a key's label, else its prefix


def _tokens_shown(record: UsageRecord) -> tuple[str, str]:
    """A text call's tokens for the latest calls: the short form (cached and cache-write counts only
    when there are any) and the full breakdown. ("", "") for an image call, which has no tokens."""
    if record.input_tokens is None and record.output_tokens is None:
        return "", ""
    counts = {
        "input": record.input_tokens or 0,
        "cached": record.cached_tokens or 0,
        "cache_write": record.cache_write_tokens or 0,
        "output": record.output_tokens or 0,
    }
    short = [f"{counts['input']:,} in"]
    if counts["cached"]:
        short.append(f"{counts['cached']:,} cached")
    if counts["cache_write"]:
        short.append(f"{counts['cache_write']:,} cache write")
    short.append(f"{counts['output']:,} out")
    full = (
        f"{counts['input']:,} input tokens (uncached), {counts['cached']:,} cached input tokens, "
        f"{counts['cache_write']:,} cache-write tokens, {counts['output']:,} output tokens"
    )
    return " · ".join(short), full


def _credential_names(*, account: Account) -> dict[str, str]:
    """What to call each `UsageRecord.credential` of the account's keys ("api_key:12" → the key)."""
    names = {f"console:{account.pk}": "Playground"}
    for api_key in ApiKey.objects.filter(account=account).only("pk", "prefix", "label"):
        names[f"api_key:{api_key.pk}"] = f"{api_key.prefix}… {api_key.label}".strip()
    return names


def call_row(
    *, record: UsageRecord, names: dict[str, str], short_names: dict[str, str] | None = None
) -> CallRow:
    """A call as the console's tables show it: `names` (credential → key prefix and label) and
    `short_names` (credential → label alone) of the account's keys."""
    short_names = short_names or {}
    tokens, tokens_title = _tokens_shown(record)
    return CallRow(
        record=record,
        via=_via(names, record.credential),
        amount=money_display(record.amount),
        tokens=tokens,
        tokens_title=tokens_title,
        via_short=short_names.get(record.credential) or _via(names, record.credential),
    )


def _credential_short_names(*, account: Account) -> dict[str, str]:
    """Each key's label (its prefix when it has none), for a narrow column; the full name in a title."""
    return {
        f"api_key:{api_key.pk}": api_key.label or f"{api_key.prefix}…"
        for api_key in ApiKey.objects.filter(account=account).only("pk", "prefix", "label")
    }


def latest_calls_for_account(*, account: Account, limit: int = LATEST_CALLS) -> list[CallRow]:
    records = UsageRecord.objects.filter(account=account).order_by("-created_at", "-id")[:limit]
    names, short_names = _credential_names(account=account), _credential_short_names(account=account)
    return [call_row(record=record, names=names, short_names=short_names) for record in records]


def usage_record_for_request(*, account: Account, request_id: str) -> UsageRecord | None:
    return UsageRecord.objects.filter(account=account, request_id=request_id).order_by("-id").first()


def idempotency_reference_for_key(*, account: Account, key: str) -> str | None:
    """The request id of the call that first used this Idempotency-Key of the account."""
    record = IdempotencyRecord.objects.filter(account=account, key=key).only("reference").first()
    return record.reference if record is not None and record.reference else None


@dataclass(frozen=True)
class PlaygroundTextModel:
    key: str  # "<group id>:<model id>": a model id can be offered by several groups
    model_id: str
    group: Group
    label: str


def playground_text_models_for_account(*, account: Account) -> list[PlaygroundTextModel]:
    """The text models the account may call: enabled models of its active allowed groups."""
    found = []
    for group in account.allowed_groups.filter(status=Group.Status.ACTIVE).order_by("pk"):
        for model in group_text_models_enabled(group_id=group.pk).values():
            found.append(
                PlaygroundTextModel(
                    key=f"{group.pk}:{model.model_id}",
                    model_id=model.model_id,
                    group=group,
                    label=(
                        f"{model.model_id} — {group.name}, {money_display(model.input_price)} in / "
                        f"{money_display(model.output_price)} out per million tokens"
                    ),
                )
            )
    return found


# --- Playground --------------------------------------------------------------------------------------


def playground_models_for_account(*, account: Account) -> list[ImageModel]:
    """The image models the account may call: enabled models of its active, image-enabled groups."""
    return list(
        ImageModel.objects.filter(
            group__in=account.allowed_groups.all(),
            group__status=Group.Status.ACTIVE,
            group__image_enabled=True,
            enabled=True,
        )
        .select_related("group")
        .order_by("group_id", "model_id")
    )


def hosted_images_stored(*, public_ids: list[str]) -> set[str]:
    """Which of these hosted images (public ids, hex) the gateway still stores."""
    if not public_ids:
        return set()
    found = HostedImage.objects.filter(public_id__in=[uuid.UUID(hex=value) for value in public_ids])
    return {public_id.hex for public_id in found.values_list("public_id", flat=True)}


# --- Authorized applications -------------------------------------------------------------------------


@dataclass(frozen=True)
class AuthorizedApplication:
    """An OAuth application (None: tokens an operator issued with `createtoken`) holding live tokens."""

    application: Application | None
    scopes: list[str]
    first_authorized: datetime
    access_expires: datetime | None
    tokens: int

    @property
    def name(self) -> str:
        return self.application.name if self.application is not None else "Issued by an operator"


def _live_access_tokens(*, account: Account, now: datetime):
    return AccessToken.objects.filter(user_id=account.user_id, expires__gt=now)


def _live_refresh_tokens(*, account: Account, now: datetime):
    live = RefreshToken.objects.filter(user_id=account.user_id, revoked__isnull=True)
    lifetime = oauth2_settings.REFRESH_TOKEN_EXPIRE_SECONDS
    if lifetime:
        live = live.filter(created__gt=now - timedelta(seconds=lifetime))
    return live


def authorized_applications_for_account(
    *, account: Account, now: datetime | None = None
) -> list[AuthorizedApplication]:
    """Applications that can still act for the account: a live access token or a refresh token."""
    moment = now or timezone.now()
    grouped: dict[int | None, dict] = {}
    for token in _live_access_tokens(account=account, now=moment).select_related("application"):
        entry = grouped.setdefault(
            token.application_id,
            {
                "application": token.application,
                "scopes": set(),
                "first": token.created,
                "expires": None,
                "n": 0,
            },
        )
        entry["scopes"].update(token.scope.split())
        entry["first"] = min(entry["first"], token.created)
        entry["expires"] = max(entry["expires"] or token.expires, token.expires)
        entry["n"] += 1
    for refresh in _live_refresh_tokens(account=account, now=moment).select_related("application"):
        entry = grouped.setdefault(
            refresh.application_id,
            {
                "application": refresh.application,
                "scopes": set(),
                "first": refresh.created,
                "expires": None,
                "n": 0,
            },
        )
        entry["first"] = min(entry["first"], refresh.created)
        if refresh.access_token_id is None:
            entry["n"] += 1  # a refresh token alone still lets the application get new access tokens
    applications = [
        AuthorizedApplication(
            application=entry["application"],
            scopes=sorted(entry["scopes"]),
            first_authorized=entry["first"],
            access_expires=entry["expires"],
            tokens=entry["n"],
        )
        for entry in grouped.values()
    ]
    return sorted(applications, key=lambda item: (item.application is None, item.name.lower()))


def application_for_account(
    *, account: Account, application_id: int | None, now: datetime | None = None
) -> AuthorizedApplication | None:
    """The authorized application with this id (None: operator-issued tokens), if it holds tokens for
    the account; None otherwise, whether it does not exist or belongs to nobody here."""
    for item in authorized_applications_for_account(account=account, now=now):
        item_id = item.application.pk if item.application is not None else None
        if item_id == application_id:
            return item
    return None


# --- Usage -------------------------------------------------------------------------------------------

USAGE_PAGE_SIZE = 50


@dataclass(frozen=True)
class UsageFilters:
    """The usage page's filters, already checked (console.forms.UsageFilterForm); empty: no filter.

    `status` is "ok" (2xx), "error" (anything else) or one HTTP status code; `first_day` and
    `last_day` are local days in GATEWAY_TIMEZONE, both included."""

    credential: str = ""
    model_id: str = ""
    status: str = ""
    first_day: date | None = None
    last_day: date | None = None


def _via(names: dict[str, str], credential: str) -> str:
    return names.get(credential) or ("OAuth token" if credential.startswith("oauth:") else credential)


def usage_records_for_account(*, account: Account, filters: UsageFilters):
    """The account's usage records matching the filters, newest first (a lazy queryset)."""
    records = UsageRecord.objects.filter(account=account)
    if filters.credential:
        records = records.filter(credential=filters.credential)
    if filters.model_id:
        records = records.filter(model_id=filters.model_id)
    if filters.status == "ok":
        records = records.filter(status__gte=200, status__lt=300)
    elif filters.status == "error":
        records = records.exclude(status__gte=200, status__lt=300)
    elif filters.status:
        records = records.filter(status=int(filters.status))
    zone = ZoneInfo(settings.GATEWAY_TIMEZONE)
    if filters.first_day is not None:
        records = records.filter(created_at__gte=datetime.combine(filters.first_day, time.min, tzinfo=zone))
    if filters.last_day is not None:
        next_day = filters.last_day + timedelta(days=1)
        records = records.filter(created_at__lt=datetime.combine(next_day, time.min, tzinfo=zone))
    return records.order_by("-created_at", "-id")


def credential_names_for_account(*, account: Account) -> dict[str, str]:
    return _credential_names(account=account)


def usage_row(*, record: UsageRecord, names: dict[str, str]) -> CallRow:
    return call_row(record=record, names=names)


def usage_rows(*, account: Account, records) -> list[CallRow]:
    names, short_names = _credential_names(account=account), _credential_short_names(account=account)
    return [call_row(record=record, names=names, short_names=short_names) for record in records]


def usage_filter_choices_for_account(*, account: Account) -> dict[str, list[tuple[str, str]]]:
    """What the usage filters offer: the account's keys (and any other credential that made calls),
    the models and the status codes its calls have."""
    names = _credential_names(account=account)
    # order_by(): the model's default ordering (by time) would make DISTINCT keep one row per call.
    records = UsageRecord.objects.filter(account=account).order_by()
    used = set(records.values_list("credential", flat=True).distinct())
    credentials = {**{key: name for key, name in names.items()}, **{c: _via(names, c) for c in used}}
    models = sorted(m for m in records.values_list("model_id", flat=True).distinct() if m)
    statuses = sorted(set(records.values_list("status", flat=True).distinct()))
    return {
        "credentials": sorted(credentials.items(), key=lambda item: item[1].lower()),
        "models": [(model, model) for model in models],
        "statuses": [(str(status), str(status)) for status in statuses],
    }


# --- Spend per model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpend:
    model_id: str  # "" for charges without a usage record of the account (e.g. an operator's charge)
    amount: Decimal


@dataclass(frozen=True)
class SpendDayByModel:
    day: date
    models: list[ModelSpend]  # in the order of the chart's legend

    @property
    def amount(self) -> Decimal:
        return sum((spend.amount for spend in self.models), start=Decimal(0))


def spend_per_day_by_model_for_account(
    *, account: Account, now: datetime | None = None
) -> tuple[list[str], list[SpendDayByModel]]:
    """Wallet charges per local day and model for the last SPEND_DAYS days: (the models, biggest
    spend first; every day, oldest first). A charge's model is that of the usage record with its
    request id, so the days add up to exactly spend_per_day_for_account's."""
    zone = ZoneInfo(settings.GATEWAY_TIMEZONE)
    today = (now or timezone.now()).astimezone(zone).date()
    first = today - timedelta(days=SPEND_DAYS - 1)
    model_of_call = UsageRecord.objects.filter(account=account, request_id=OuterRef("reference")).order_by(
        "-id"
    )
    rows = (
        LedgerEntry.objects.filter(
            wallet__account=account,
            kind=LedgerEntry.Kind.CHARGE,
            created_at__gte=datetime.combine(first, time.min, tzinfo=zone),
        )
        .annotate(
            day=TruncDate("created_at", tzinfo=zone), model=Subquery(model_of_call.values("model_id")[:1])
        )
        .values("day", "model")
        .annotate(total=Sum("amount"))
    )
    totals: dict[tuple[date, str], Decimal] = {}
    per_model: dict[str, Decimal] = {}
    for row in rows:
        model = row["model"] or ""
        amount = -row["total"]  # charges are stored negative; spend is shown positive
        totals[(row["day"], model)] = totals.get((row["day"], model), Decimal(0)) + amount
        per_model[model] = per_model.get(model, Decimal(0)) + amount
    models = sorted(per_model, key=lambda model: (-per_model[model], model))
    days = [
        SpendDayByModel(
            day=day,
            models=[ModelSpend(model_id=m, amount=totals.get((day, m), Decimal(0))) for m in models],
        )
        for day in (first + timedelta(days=offset) for offset in range(SPEND_DAYS))
    ]
    return models, days
