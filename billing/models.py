from django.conf import settings
from django.db import models

MONEY = {"max_digits": 18, "decimal_places": 4}


class Wallet(models.Model):
    """An account's money. `balance` moves only through ledger entries (billing.services);
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
    def available(self):
        return self.balance - self.held


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
        return f"{self.kind} {self.amount} → {self.balance_after}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise AppendOnlyError("Ledger entries are append-only; write an adjustment instead.")
        return super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Ledger entries are append-only and cannot be deleted.")


class Subscription(models.Model):
    """An account's plan for a subscription-billed group: calls count against its caps, in ¥ at the
    model's price. A blank cap means no cap for that window."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="subscriptions")
    group = models.ForeignKey("groups.Group", on_delete=models.PROTECT, related_name="subscriptions")
    daily_limit = models.DecimalField(null=True, blank=True, **MONEY)
    weekly_limit = models.DecimalField(null=True, blank=True, **MONEY)
    monthly_limit = models.DecimalField(null=True, blank=True, **MONEY)
    total_limit = models.DecimalField(null=True, blank=True, **MONEY)
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
