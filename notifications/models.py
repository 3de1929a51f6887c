"""Alerts before the money runs out: an account's thresholds and where to send what crosses them
(`AlertSettings`), and the outbox of events (`Notification`), written in the transaction of the charge
that crossed a line and sent later by `manage.py deliver_notifications`."""

from __future__ import annotations

from django.db import models

from core.modelutils import MONEY

# Percentages of each key budget and subscription cap that emit an event, when the account set none.
DEFAULT_PERCENTAGES = [80, 100]


def default_percentages() -> list[int]:
    return list(DEFAULT_PERCENTAGES)


class AlertSettings(models.Model):
    """An account's alert thresholds and delivery.

    `balance_floor`: an event when the available balance (balance less what calls in flight hold) is
    below it after a charge; once, then again only after a top-up or adjustment has brought the
    available balance back to the floor or above (`floor_epoch` counts those re-armings). `percentages`:
    of each key budget and subscription cap, an event once per window when its spend reaches one.
    `webhook_secret` signs the webhook's events; made when a URL is set, rotated by the owner."""

    account = models.OneToOneField(
        "accounts.Account", on_delete=models.CASCADE, related_name="alert_settings"
    )
    balance_floor = models.DecimalField(null=True, blank=True, **MONEY)
    percentages = models.JSONField(default=default_percentages, blank=True)
    webhook_url = models.CharField(max_length=500, blank=True, default="")
    webhook_secret = models.CharField(max_length=100, blank=True, default="")
    email_enabled = models.BooleanField(default=True)
    floor_epoch = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "alert settings"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(balance_floor__isnull=True) | models.Q(balance_floor__gte=0),
                name="alert_settings_floor_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"Alerts of {self.account}"


class Notification(models.Model):
    """One event of the outbox: what crossed which line, and how its delivery went.

    (account, kind, subject, threshold, window) is unique: concurrent charges crossing the same line
    in the same window insert one row (ON CONFLICT DO NOTHING); the next window, or the next arming of
    the balance floor, is another row."""

    class Kind(models.TextChoices):
        BALANCE_FLOOR = "balance.below_floor", "Balance below floor"
        SUBSCRIPTION_CAP = "subscription.cap_threshold", "Subscription cap threshold"
        KEY_BUDGET = "key.budget_threshold", "Key budget threshold"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped"

    event_id = models.CharField(max_length=40, unique=True)
    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=40, choices=Kind.choices)
    # What crossed: "balance", "subscription:<id>:<window>" or "key:<id>".
    subject = models.CharField(max_length=100)
    threshold = models.DecimalField(**MONEY)
    # Which window it crossed in: a local start date (caps, budgets) or the floor's arming.
    window = models.CharField(max_length=40)
    payload = models.JSONField()
    created_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The email is sent once, on the first attempt after which it went out; the webhook is retried.
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["account", "kind", "subject", "threshold", "window"],
                name="notification_once_per_window",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["pending", "delivered", "failed", "skipped"]),
                name="notification_status_valid",
            ),
        ]
        indexes = [
            # The worker claims due pending events by when they are due.
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(status="pending"),
                name="notification_due_idx",
            ),
            models.Index(fields=["account", "-created_at"], name="notification_account_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} {self.kind} {self.status}"
