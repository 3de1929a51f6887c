from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Cached credentials must follow every write to users and accounts.
        from accounts.signals import credential_receivers_connect

        credential_receivers_connect()
