from django import forms
from django.contrib import admin

from billing.admin import MoneyShownAdmin
from images.models import HostedImage, ImageModel


class StringListField(forms.CharField):
    """A list of strings edited as one comma-separated line ("1024x1024, 1536x1024, auto")."""

    def prepare_value(self, value):
        if isinstance(value, list):
            return ", ".join(value)
        return value

    def to_python(self, value):
        text = super().to_python(value) or ""
        return [item.strip() for item in text.replace("\n", ",").split(",") if item.strip()]


class ImageModelForm(forms.ModelForm):
    """Capabilities as comma-separated lists; the model's clean() checks them with the same rules
    as the config loader (images/capabilities.py)."""

    sizes = StringListField(required=False, help_text="e.g. 1024x1024, 1536x1024, auto")
    qualities = StringListField(required=False, help_text="e.g. low, medium, high")
    styles = StringListField(required=False, help_text="e.g. vivid, natural; empty = not supported")
    backgrounds = StringListField(required=False, help_text="e.g. transparent, opaque, auto")
    output_formats = StringListField(required=False, help_text="any of png, jpeg, webp")

    class Meta:
        model = ImageModel
        fields = (
            "model_id",
            "group",
            "price",
            "upstream_model",
            "upstreams",
            "sizes",
            "qualities",
            "styles",
            "backgrounds",
            "output_formats",
            "output_compression_min",
            "output_compression_max",
            "max_n",
            "edits_supported",
            "stream_supported",
            "default_response_format",
            "enabled",
        )


@admin.register(ImageModel)
class ImageModelAdmin(MoneyShownAdmin):
    form = ImageModelForm
    money_fields = ("price",)
    list_display = (
        "model_id",
        "group",
        "price",
        "upstream_model",
        "max_n",
        "edits_supported",
        "stream_supported",
        "enabled",
    )
    list_filter = ("group", "enabled", "edits_supported", "stream_supported")
    search_fields = ("model_id", "upstream_model")
    filter_horizontal = ("upstreams",)
    list_select_related = ("group",)


@admin.register(HostedImage)
class HostedImageAdmin(admin.ModelAdmin):
    """Read-only: hosted images are written by the pipeline and deleted by purge_images."""

    list_display = ("public_id", "content_type", "size_bytes", "created_at")
    list_filter = ("content_type",)
    search_fields = ("public_id",)
    date_hierarchy = "created_at"
    readonly_fields = ("public_id", "storage_name", "content_type", "size_bytes", "created_at")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
