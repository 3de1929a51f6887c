from django.contrib import admin

from images.models import ImageModel, Upstream


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
    )
    list_filter = ("kind", "enabled")
    search_fields = ("name", "base_url")


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
