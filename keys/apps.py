from django.apps import AppConfig


class KeysConfig(AppConfig):
    name = "keys"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from oauth2_provider.settings import oauth2_settings

        from core.config_registry import Invalidating, invalidating_register
        from keys.selectors import access_token_live

        # Revocation, expiry, group or label of a key (keys/services.py keeps its own mark of
        # last_used_at); a token's scope or expiry, or its deletion; an application's name labels its
        # tokens. Refresh tokens authenticate nothing under /v1, and revoking one deletes its access token.
        invalidating_register(
            Invalidating("keys.ApiKey", fields_not_cached=frozenset({"last_used_at"})),
            Invalidating(oauth2_settings.ACCESS_TOKEN_MODEL, deletion_invalidates=access_token_live),
            Invalidating(oauth2_settings.APPLICATION_MODEL),
        )
