from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    """A manual API key. Only a display prefix and an HMAC-SHA256 of the secret under a server-side
    pepper are stored: a dump of this table gives nobody a usable key."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="api_keys")
    group = models.ForeignKey("groups.Group", on_delete=models.PROTECT, related_name="api_keys")
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="The first characters of the key, for recognising it.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… {self.label}".strip()

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"
