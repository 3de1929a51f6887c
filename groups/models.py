from django.db import models


class Group(models.Model):
    """A group of models with its billing mode and per-credential limits.

    The numeric id is chosen by staff (or the config file) and never changes: callers select a group
    with `<group_id>:<model>`, so it is part of the public API.
    """

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        DISABLED = "disabled", "Disabled"
        DELETED = "deleted", "Deleted"
        UNAVAILABLE = "unavailable", "Unavailable"

    class Billing(models.TextChoices):
        BALANCE = "balance", "Wallet balance"
        SUBSCRIPTION = "subscription", "Subscription"

    id = models.PositiveIntegerField(
        primary_key=True, help_text="Stable numeric id used in <group_id>:<model>."
    )
    name = models.CharField(max_length=100, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    image_enabled = models.BooleanField(default=False, help_text="May serve the image endpoints.")
    billing = models.CharField(max_length=16, choices=Billing.choices, default=Billing.BALANCE)
    allow_group_override = models.BooleanField(
        default=False, help_text="OAuth callers may select another group with <group_id>:<model>."
    )
    rpm = models.PositiveIntegerField(
        default=0, help_text="Requests per minute per credential; 0 = unlimited."
    )
    concurrency = models.PositiveIntegerField(
        default=0, help_text="Calls in flight per credential; 0 = unlimited."
    )
    tpm = models.PositiveIntegerField(
        default=0, help_text="Tokens (input + output) per minute of text calls per credential; 0 = unlimited."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["active", "disabled", "deleted", "unavailable"]),
                name="group_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(billing__in=["balance", "subscription"]), name="group_billing_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.id})"
