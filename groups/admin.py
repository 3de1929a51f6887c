from django.contrib import admin

from groups.models import Group


@admin.register(Group)
class GroupAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "name",
        "status",
        "image_enabled",
        "billing",
        "allow_group_override",
        "rpm",
        "tpm",
        "concurrency",
    )
    list_filter = ("status", "billing", "image_enabled", "allow_group_override")
    search_fields = ("name", "=id")

    def get_readonly_fields(self, request, obj=None):
        # The id is public API (<group_id>:<model>): chosen once, never changed.
        return ("id",) if obj is not None else ()
