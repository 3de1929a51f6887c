"""Which scopes OAuth tokens can hold, and which the consent flow may grant (django-oauth-toolkit's
SCOPES_BACKEND_CLASS): the scopes are the keys app's (keys/credentials.py), not a setting."""

from __future__ import annotations

from typing import Any

from oauth2_provider.scopes import BaseScopes

from keys.credentials import SCOPES, STAFF_ONLY_SCOPES

# What an application gets when it asks for no scope.
DEFAULT_SCOPES = ["profile:read"]


class ConsentFlowScopes(BaseScopes):
    """Every scope but the staff-only ones: an application asking for `admin:provision` gets
    `invalid_scope`, whoever signs in. Operators issue such tokens to staff users with createtoken
    (keys.services.oauth_token_create refuses anyone else)."""

    def get_all_scopes(self) -> dict[str, str]:
        return SCOPES

    def get_available_scopes(
        self, application: Any = None, request: Any = None, *args: Any, **kwargs: Any
    ) -> list[str]:
        return [scope for scope in SCOPES if scope not in STAFF_ONLY_SCOPES]

    def get_default_scopes(
        self, application: Any = None, request: Any = None, *args: Any, **kwargs: Any
    ) -> list[str]:
        return list(DEFAULT_SCOPES)
