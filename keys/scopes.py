"""Which scopes the OAuth consent flow may grant (django-oauth-toolkit's SCOPES_BACKEND_CLASS)."""

from __future__ import annotations

from typing import Any

from oauth2_provider.scopes import SettingsScopes

from keys.credentials import STAFF_ONLY_SCOPES


class ConsentFlowScopes(SettingsScopes):
    """Every scope but the staff-only ones: an application asking for `admin:provision` gets
    `invalid_scope`, whoever signs in. Operators issue such tokens to staff users with createtoken
    (keys.services.oauth_token_create refuses anyone else)."""

    def get_available_scopes(
        self, application: Any = None, request: Any = None, *args: Any, **kwargs: Any
    ) -> list[str]:
        available = super().get_available_scopes(application, request, *args, **kwargs)
        return [scope for scope in available if scope not in STAFF_ONLY_SCOPES]
