from decimal import Decimal
from typing import Any, NoReturn

from django.conf import settings
from django.db import models

from billing.money import money_display
from core.modelutils import MONEY


class Wallet(models.Model):
    """An account's money. `balance` moves only through ledger entries (billing.ledger);
    `held` is the sum of open holds, so available = balance - held."""

    account = models.OneToOneField("accounts.Account", on_delete=models.CASCADE, related_name="wallet")
    balance = models.DecimalField(default=0, **MONEY)
    held = models.DecimalField(default=0, **MONEY)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # Backstops for the services' conditional updates: the database refuses overdraft.
            models.CheckConstraint(condition=models.Q(balance__gte=0), name="wallet_balance_not_negative"),
            models.CheckConstraint(condition=models.Q(held__gte=0), name="wallet_held_not_negative"),
            models.CheckConstraint(
                condition=models.Q(held__lte=models.F("balance")), name="wallet_held_within_balance"
            ),
        ]

    def __str__(self) -> str:
        return f"Wallet of {self.account}"

    @property
    def available(self) -> Decimal:
        return self.balance - self.held

    @property
    def balance_display(self) -> str:
        """The balance for people (`money_display`), for pages of apps that do not import billing."""
        return money_display(self.balance)


class AppendOnlyError(Exception):
    pass


class LedgerEntry(models.Model):
    """One movement of a wallet's balance. Entries are never changed or deleted: corrections are new
    entries (kind=adjustment)."""

    class Kind(models.TextChoices):
        TOP_UP = "top_up", "Top-up"
        CHARGE = "charge", "Charge"
        ADJUSTMENT = "adjustment", "Adjustment"

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="entries")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    amount = models.DecimalField(help_text="Signed: credits positive, charges negative.", **MONEY)
    balance_after = models.DecimalField(**MONEY)
    reference = models.CharField(max_length=200, blank=True, help_text="Request id, or top-up reference.")
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(balance_after__gte=0), name="ledger_balance_after_not_negative"
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(kind="top_up", amount__gt=0)
                    | models.Q(kind="charge", amount__lt=0)
                    | models.Q(kind="adjustment")
                ),
                name="ledger_amount_sign_matches_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {money_display(self.amount)} → {money_display(self.balance_after)}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise AppendOnlyError("Ledger entries are append-only; write an adjustment instead.")
        return super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("Ledger entries are append-only and cannot be deleted.")


class Subscription(models.Model):
    """An account's plan for a subscription-billed group: calls count against its caps, in ¥ at the
    model's price. A blank cap means no cap for that window. `model_ids` restricts the plan to some
    of the group's models (a call for another model is SUBSCRIPTION_INVALID); empty covers them all."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="subscriptions")
    group = models.ForeignKey("groups.Group", on_delete=models.PROTECT, related_name="subscriptions")
    daily_limit = models.DecimalField(null=True, blank=True, **MONEY)
    weekly_limit = models.DecimalField(null=True, blank=True, **MONEY)
    monthly_limit = models.DecimalField(null=True, blank=True, **MONEY)
    total_limit = models.DecimalField(null=True, blank=True, **MONEY)
    model_ids = models.JSONField(
        default=list,
        blank=True,
        help_text='Model ids the plan covers, e.g. ["beta-imagine-image"]; empty = every model of the group.',
    )
    starts_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["account_id", "group_id"]
        constraints = [
            models.UniqueConstraint(fields=["account", "group"], name="subscription_one_per_account_group"),
            models.CheckConstraint(
                condition=(
                    (models.Q(daily_limit__isnull=True) | models.Q(daily_limit__gte=0))
                    & (models.Q(weekly_limit__isnull=True) | models.Q(weekly_limit__gte=0))
                    & (models.Q(monthly_limit__isnull=True) | models.Q(monthly_limit__gte=0))
                    & (models.Q(total_limit__isnull=True) | models.Q(total_limit__gte=0))
                ),
                name="subscription_limits_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account} @ {self.group}"


class Hold(models.Model):
    """Money (or subscription quota) reserved for one call in flight.

    A hold is opened before the upstream call and resolved exactly once: captured when the call
    succeeded (a ledger charge, or the subscription usage kept), released when it failed, expired by
    `release_stale_holds` when its worker died. Every resolution is a status transition guarded by
    `status = open` in the WHERE clause, so racing resolutions cannot both take effect.
    """

    class Kind(models.TextChoices):
        WALLET = "wallet", "Wallet"
        SUBSCRIPTION = "subscription", "Subscription"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CAPTURED = "captured", "Captured"
        RELEASED = "released", "Released"
        EXPIRED = "expired", "Expired"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    wallet = models.ForeignKey(Wallet, null=True, blank=True, on_delete=models.PROTECT, related_name="holds")
    subscription = models.ForeignKey(
        Subscription, null=True, blank=True, on_delete=models.CASCADE, related_name="holds"
    )
    amount = models.DecimalField(**MONEY)
    # What the capture charged (or counted): the whole amount for a fixed-price call; for a per-token
    # call its exact cost, at most the amount, the rest released by the same capture. Null until then.
    captured_amount = models.DecimalField(null=True, blank=True, **MONEY)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    reference = models.CharField(max_length=200, blank=True, help_text="Request id of the call.")
    # The process whose call it is (core.process_identity: `<instance>:<pid>`), so that the holds of
    # a worker that died are released at once (`worker_gone`) rather than when they expire.
    owner = models.CharField(max_length=100, blank=True, default="")
    # The calendar windows a subscription hold counts in (local dates in GATEWAY_TIMEZONE), so that a
    # release gives the quota back to exactly the counters it was taken from, even after midnight.
    day_start = models.DateField(null=True, blank=True)
    week_start = models.DateField(null=True, blank=True)
    month_start = models.DateField(null=True, blank=True)
    # The API key whose budget window this hold also counts in (KeyBudgetUsage), with that window, so
    # that a capture for less and a release give back to exactly that window. Empty for a key
    # without a budget, and for OAuth tokens and the console.
    api_key = models.ForeignKey(
        "keys.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    key_window = models.CharField(max_length=8, blank=True, default="")
    key_window_start = models.DateField(null=True, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # release_stale_holds scans only open holds by expiry.
            models.Index(
                fields=["expires_at"], condition=models.Q(status="open"), name="hold_open_expiry_idx"
            ),
            models.Index(fields=["reference"], name="hold_reference_idx"),
            # worker_gone finds a dead process's open holds.
            models.Index(fields=["owner"], condition=models.Q(status="open"), name="hold_open_owner_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="hold_amount_not_negative"),
            models.CheckConstraint(
                condition=models.Q(captured_amount__isnull=True)
                | models.Q(captured_amount__gte=0, captured_amount__lte=models.F("amount")),
                name="hold_captured_within_amount",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["open", "captured", "released", "expired"]),
                name="hold_status_valid",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(kind="wallet", wallet__isnull=False, subscription__isnull=True)
                    | models.Q(
                        kind="subscription",
                        wallet__isnull=True,
                        subscription__isnull=False,
                        day_start__isnull=False,
                        week_start__isnull=False,
                        month_start__isnull=False,
                    )
                ),
                name="hold_target_matches_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"hold #{self.pk} {self.kind} {money_display(self.amount)} {self.status}"


class SubscriptionUsage(models.Model):
    """How much of a subscription's cap one calendar window has used, open holds included.

    Reservations add to `used` with a conditional UPDATE (`used + price <= cap`), releases subtract;
    the total window has one row with a fixed start and never resets.
    """

    class Window(models.TextChoices):
        DAY = "day", "Day"
        WEEK = "week", "Week"
        MONTH = "month", "Month"
        TOTAL = "total", "Total"

    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="usage")
    window = models.CharField(max_length=8, choices=Window.choices)
    window_start = models.DateField(help_text="Local date in GATEWAY_TIMEZONE; fixed for the total.")
    used = models.DecimalField(default=0, **MONEY)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["subscription_id", "window", "-window_start"]
        verbose_name_plural = "subscription usage"
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "window", "window_start"], name="subscription_usage_one_per_window"
            ),
            models.CheckConstraint(condition=models.Q(used__gte=0), name="subscription_usage_not_negative"),
            models.CheckConstraint(
                condition=models.Q(window__in=["day", "week", "month", "total"]),
                name="subscription_usage_window_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subscription} {self.window} from {self.window_start}: {money_display(self.used)}"


class KeyBudgetUsage(models.Model):
    """How much of an API key's budget one window has used, open holds included.

    The window is the key's budget period as a calendar window in GATEWAY_TIMEZONE (billing/windows.py:
    day, week, month, or the total window with its fixed start). A reservation adds to `used` with a
    conditional UPDATE (`used + price <= budget`) in the same transaction as the wallet or
    subscription hold; a capture for less and a release give the difference back."""

    api_key = models.ForeignKey("keys.ApiKey", on_delete=models.CASCADE, related_name="budget_usage")
    window = models.CharField(max_length=8, choices=SubscriptionUsage.Window.choices)
    window_start = models.DateField(help_text="Local date in GATEWAY_TIMEZONE; fixed for the total.")
    used = models.DecimalField(default=0, **MONEY)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["api_key_id", "window", "-window_start"]
        verbose_name_plural = "key budget usage"
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "window", "window_start"], name="key_budget_usage_one_per_window"
            ),
            models.CheckConstraint(condition=models.Q(used__gte=0), name="key_budget_usage_not_negative"),
            models.CheckConstraint(
                condition=models.Q(window__in=["day", "week", "month", "total"]),
                name="key_budget_usage_window_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"key #{self.api_key_id} {self.window} from {self.window_start}: {money_display(self.used)}"


class UsageRecord(models.Model):
    """One call of a billed endpoint, successful or not (the usage log staff read in the admin)."""

    request_id = models.CharField(max_length=200)
    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="usage_records")
    credential = models.CharField(max_length=64, help_text="Credential.limit_key, e.g. api_key:12.")
    group = models.ForeignKey(
        "groups.Group", null=True, blank=True, on_delete=models.SET_NULL, related_name="usage_records"
    )
    model_id = models.CharField(max_length=200, blank=True)
    endpoint = models.CharField(max_length=100)
    billing = models.CharField(max_length=16, blank=True, help_text="balance or subscription; blank if none.")
    status = models.PositiveSmallIntegerField(help_text="HTTP status answered.")
    error_code = models.CharField(max_length=100, blank=True)
    amount = models.DecimalField(default=0, help_text="Charged; 0 when not charged.", **MONEY)
    upstream = models.CharField(max_length=100, blank=True)
    # Tokens of a text call as the upstream reported them (null for the image endpoints): input
    # tokens at the input price (cached and cache-write ones not included), then the cached ones, the
    # cache writes (Anthropic; those to a one-hour cache among them also apart) and the output tokens
    # (reasoning included).
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_1h_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["account", "created_at"], name="usage_account_created_idx"),
            models.Index(fields=["model_id", "created_at"], name="usage_model_created_idx"),
            models.Index(fields=["status", "created_at"], name="usage_status_created_idx"),
            models.Index(fields=["request_id"], name="usage_request_id_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.endpoint} {self.status}"


class IdempotencyRecord(models.Model):
    """The first response to an `Idempotency-Key`, replayed for the same key and body for a while.

    A row is claimed (inserted `in_progress`) before the work starts; the unique (account, key)
    constraint makes exactly one of several concurrent requests the owner. `owner` and `locked_until`
    let a later request take over a row whose worker died mid-call, and keep a slow former owner from
    overwriting the new owner's result.
    """

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress", "In progress"
        COMPLETED = "completed", "Completed"

    account = models.ForeignKey(
        "accounts.Account", on_delete=models.CASCADE, related_name="idempotency_records"
    )
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=128)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    owner = models.CharField(max_length=32)
    # The request id of the call the owner runs (its hold's reference): a row taken over from a dead
    # worker is not run again when that call was charged.
    reference = models.CharField(max_length=200, blank=True)
    locked_until = models.DateTimeField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.BinaryField(null=True, blank=True)
    response_content_type = models.CharField(max_length=200, blank=True)
    response_headers = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["account", "key"], name="idempotency_one_per_account_key"),
            models.CheckConstraint(
                condition=models.Q(status__in=["in_progress", "completed"]), name="idempotency_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account} {self.key!r} {self.status}"
