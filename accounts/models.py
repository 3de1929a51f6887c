from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """The project's user model, custom from the first migration so it can grow without pain."""


class Account(models.Model):
    """The billing owner: wallets, keys, subscriptions and usage hang off an account (one per user)."""

    user = models.OneToOneField(User, on_delete=models.PROTECT, related_name="account")
    current_group = models.ForeignKey(
        "groups.Group",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Default group for OAuth calls.",
    )
    allowed_groups = models.ManyToManyField("groups.Group", blank=True, related_name="accounts")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.user.get_username()
