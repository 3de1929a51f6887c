from django.apps import AppConfig


class KeysConfig(AppConfig):
    name = "keys"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Cached credentials must follow every write to keys, tokens and applications.
        from keys.signals import credential_receivers_connect

        credential_receivers_connect()
