from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core.config_registry import Invalidating, invalidating_register

        # Writes that change a cached credential's account: a user's is_active (sign-ins write only
        # last_login), an account's current group, the groups it may use (both sides of the relation).
        invalidating_register(
            Invalidating("accounts.User", fields_not_cached=frozenset({"last_login"})),
            Invalidating("accounts.Account"),
            Invalidating("accounts.Account_allowed_groups"),
        )
