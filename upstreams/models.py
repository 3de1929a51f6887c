from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models


class Upstream(models.Model):
    """A provider endpoint. Its API key lives in the environment variable it names, never in the database."""

    class Kind(models.TextChoices):
        OPENAI = "openai", "OpenAI"
        OPENAI_COMPATIBLE = "openai-compatible", "OpenAI-compatible (chat completions only)"
        GEMINI = "gemini", "Gemini"
        ANTHROPIC = "anthropic", "Anthropic"
        DEMO = "demo", "Built-in demo (offline)"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    base_url = models.URLField(max_length=500, blank=True, help_text="Not used by the demo kind.")
    api_key_env = models.CharField(
        max_length=100, blank=True, help_text="Name of the environment variable holding the provider key."
    )
    timeout_seconds = models.PositiveIntegerField(default=120, validators=[MinValueValidator(1)])
    priority = models.IntegerField(default=0, help_text="Lower is tried first.")
    weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    enabled = models.BooleanField(default=True)
    # Retry and circuit settings for calls where this is the primary upstream; blank = the
    # GATEWAY_RETRY_* / GATEWAY_CIRCUIT_* defaults (upstreams/resilience.py).
    max_retries = models.PositiveSmallIntegerField(null=True, blank=True)
    retry_base_seconds = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    retry_max_wait_seconds = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    retry_deadline_seconds = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    circuit_threshold = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    circuit_cooldown_seconds = models.FloatField(null=True, blank=True, validators=[MinValueValidator(1)])
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table keeps the name it had when the model lived in the images app.
        db_table = "images_upstream"
        ordering = ["priority", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=["openai", "openai-compatible", "gemini", "anthropic", "demo"]),
                name="upstream_kind_valid",
            ),
            models.CheckConstraint(condition=models.Q(weight__gte=1), name="upstream_weight_positive"),
            models.CheckConstraint(
                condition=models.Q(timeout_seconds__gte=1), name="upstream_timeout_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def clean(self) -> None:
        if self.kind != self.Kind.DEMO and not self.base_url:
            raise ValidationError({"base_url": "Required for every kind but demo."})
