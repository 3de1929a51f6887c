from django.apps import AppConfig


class GroupsConfig(AppConfig):
    name = "groups"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core.config_registry import Invalidating, invalidating_register

        # Access decisions and limits; a new group is listed.
        invalidating_register(Invalidating("groups.Group", new_rows=True))
