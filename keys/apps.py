from django.apps import AppConfig


class KeysConfig(AppConfig):
    name = "keys"
    default_auto_field = "django.db.models.BigAutoField"
