from django.contrib import admin, messages
from django.db import models

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

    @admin.action(description="Close the circuit of selected upstreams")
    def close_circuits(self, request, queryset):
        for upstream in queryset:
            circuit_reset(upstream_id=upstream.pk)
        self.message_user(request, f"Closed the circuit of {queryset.count()} upstream(s).", messages.SUCCESS)


@admin.register(ImageModel)
class ImageModelAdmin(admin.ModelAdmin):
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
