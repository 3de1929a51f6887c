from django.apps import AppConfig


class GroupsConfig(AppConfig):
    name = "groups"
    default_auto_field = "django.db.models.BigAutoField"
