from django import forms
from django.contrib import admin
from django.db import models

from gateway_project.admin_confirm import admin_action_confirmed
from images.circuit import STATS_WINDOW_MINUTES, circuit_reset, circuit_state
from images.models import HostedImage, ImageModel, Upstream


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "kind",
        "base_url",
        "api_key_env",
        "priority",
        "weight",
        "timeout_seconds",
        "enabled",
        "circuit",
        "recent_errors",
    )
    list_filter = ("kind", "enabled")
    search_fields = ("name", "base_url")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    readonly_fields = ("circuit", "recent_errors")
    actions = ("close_circuits",)

    @admin.display(description="Circuit")
    def circuit(self, obj: Upstream) -> str:
        state = circuit_state(upstream_id=obj.pk)
        if state.state == "closed":
            return f"closed ({state.consecutive_failures} consecutive failures)"
        return state.state

    @admin.display(description=f"Errors, last {STATS_WINDOW_MINUTES} min")
    def recent_errors(self, obj: Upstream) -> str:
        state = circuit_state(upstream_id=obj.pk)
        if state.recent_error_rate is None:
            return "no calls"
        return f"{state.recent_errors}/{state.recent_calls} ({state.recent_error_rate:.0%})"

    @admin.action(description="Close the circuit of selected upstreams…")
    def close_circuits(self, request, queryset):
        def close(upstreams):
            for upstream in upstreams:
                circuit_reset(upstream_id=upstream.pk)
            return f"Closed the circuit of {len(upstreams)} upstream(s)."

        return admin_action_confirmed(
            model_admin=self,
            request=request,
            queryset=queryset,
            action="close_circuits",
            title="Close circuits",
            consequence="Calls go to these upstreams again at once, even if they are still failing.",
            perform=lambda upstreams: close(list(upstreams)),
        )


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
class ImageModelAdmin(admin.ModelAdmin):
    form = ImageModelForm
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
