import uuid
from decimal import Decimal

from django.apps import apps
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from core.modelutils import MONEY
from images.capabilities import validate_capabilities

RESPONSE_FORMATS = ("url", "b64_json")


class ImageModel(models.Model):
    """An image model offered in one group, its fixed price per successful call and its capabilities.

    A model id is unique within its group; the same id may be offered by several groups (callers with
    OAuth tokens pick one with `<group_id>:<model>`).
    """

    model_id = models.CharField(max_length=200, help_text="The id callers send as `model`.")
    group = models.ForeignKey("groups.Group", on_delete=models.PROTECT, related_name="image_models")
    price = models.DecimalField(
        **MONEY,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="¥ per successful call.",
    )
    upstream_model = models.CharField(
        max_length=200, blank=True, help_text="Name sent upstream; blank = model id."
    )
    upstreams = models.ManyToManyField("upstreams.Upstream", related_name="image_models")
    sizes = models.JSONField(default=list, blank=True, help_text='e.g. ["1024x1024", "auto"]')
    qualities = models.JSONField(default=list, blank=True)
    styles = models.JSONField(default=list, blank=True)
    backgrounds = models.JSONField(default=list, blank=True)
    output_formats = models.JSONField(default=list, blank=True)
    output_compression_min = models.PositiveSmallIntegerField(null=True, blank=True)
    output_compression_max = models.PositiveSmallIntegerField(null=True, blank=True)
    max_n = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(1)])
    edits_supported = models.BooleanField(default=False)
    stream_supported = models.BooleanField(default=False)
    default_response_format = models.CharField(
        max_length=16, choices=[(f, f) for f in RESPONSE_FORMATS], default="b64_json"
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["group_id", "model_id"]
        constraints = [
            models.UniqueConstraint(fields=["group", "model_id"], name="image_model_unique_in_group"),
            models.CheckConstraint(condition=models.Q(price__gte=0), name="image_model_price_not_negative"),
            models.CheckConstraint(condition=models.Q(max_n__gte=1), name="image_model_max_n_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.model_id} [{self.group_id}]"

    @property
    def upstream_model_name(self) -> str:
        return self.upstream_model or self.model_id

    @property
    def output_compression_range(self) -> tuple[int, int] | None:
        if self.output_compression_min is None or self.output_compression_max is None:
            return None
        return (self.output_compression_min, self.output_compression_max)

    def clean(self) -> None:
        errors = validate_capabilities(
            sizes=self.sizes,
            qualities=self.qualities,
            styles=self.styles,
            backgrounds=self.backgrounds,
            output_formats=self.output_formats,
            output_compression=(self.output_compression_min, self.output_compression_max),
        )
        if "output_compression" in errors:  # the range is two columns: its error goes on the first
            errors["output_compression_min"] = errors.pop("output_compression")
        if self.group_id is not None and text_model_exists(group_id=self.group_id, model_id=self.model_id):
            errors["model_id"] = f"The group already has a text model called {self.model_id!r}."
        if errors:
            raise ValidationError(errors)


def text_model_exists(*, group_id: int, model_id: str) -> bool:
    """A model id is unique within its group across image and text models. The text models are
    another family's table, read by label: the families import neither."""
    return apps.get_model("chat", "TextModel").objects.filter(group_id=group_id, model_id=model_id).exists()


class HostedImage(models.Model):
    """An image the gateway stores to answer `response_format=url` when the upstream gave base64.

    Served through a signed, expiring link (images/hosting.py); deleted after the retention period by
    `python manage.py purge_images`. The stored file's name is never shown to callers.
    """

    class ContentType(models.TextChoices):
        PNG = "image/png", "PNG"
        JPEG = "image/jpeg", "JPEG"
        WEBP = "image/webp", "WebP"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    storage_name = models.CharField(max_length=300, help_text="Name in the default storage.")
    content_type = models.CharField(max_length=32, choices=ContentType.choices)
    size_bytes = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(content_type__in=["image/png", "image/jpeg", "image/webp"]),
                name="hosted_image_content_type_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.content_type}, {self.size_bytes} bytes)"
