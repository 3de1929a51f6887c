from django.db import models
from django.utils import timezone

from core.modelutils import MONEY


class ApiKey(models.Model):
    """A manual API key. Only a display prefix and an HMAC-SHA256 of the secret under a server-side
    pepper are stored: a dump of this table gives nobody a usable key."""

    class BudgetPeriod(models.TextChoices):
        DAILY = "daily", "Daily"
        WEEKLY = "weekly", "Weekly"
        MONTHLY = "monthly", "Monthly"
        TOTAL = "total", "Total"

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="api_keys")
    group = models.ForeignKey("groups.Group", on_delete=models.PROTECT, related_name="api_keys")
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="The first characters of the key, for recognising it.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Per-key limits (docs/billing.md, docs/authentication.md): each optional, unset = no limit beyond
    # the account's and the group's. keys/services.py `api_key_limits_clean` is the one check of them.
    budget = models.DecimalField(
        null=True, blank=True, help_text="The most the key may spend per budget period.", **MONEY
    )
    budget_period = models.CharField(max_length=8, choices=BudgetPeriod.choices, blank=True, default="")
    model_ids = models.JSONField(
        default=list, blank=True, help_text="Model ids of the key's group it may call; empty = all."
    )
    rpm = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute; empty = no limit."
    )
    tpm = models.PositiveIntegerField(
        null=True, blank=True, help_text="Tokens (input + output) per minute of text calls; empty = no limit."
    )
    allowed_ips = models.JSONField(
        default=list, blank=True, help_text="CIDR networks the caller's address must be in; empty = any."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(budget__isnull=True) | models.Q(budget__gte=0),
                name="api_key_budget_not_negative",
            ),
            models.CheckConstraint(
                condition=(models.Q(budget__isnull=True) & models.Q(budget_period=""))
                | (
                    models.Q(budget__isnull=False)
                    & models.Q(budget_period__in=["daily", "weekly", "monthly", "total"])
                ),
                name="api_key_budget_with_period",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… {self.label}".strip()

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"
