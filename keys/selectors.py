"""Reads of credentials. Every lookup is by a digest of the secret, never by the secret itself."""

from __future__ import annotations

import hmac

from oauth2_provider.models import AccessToken

from keys.models import ApiKey
from keys.secrets import api_key_hash, oauth_token_checksum


def api_key_get_by_secret(*, secret: str) -> ApiKey | None:
    """The key whose stored HMAC matches `secret` (with its account, user and group), or None."""
    digest = api_key_hash(secret)
    api_key = (
        ApiKey.objects.select_related("account__user", "account__current_group", "group")
        .filter(key_hash=digest)
        .first()
    )
    # The index lookup finds the row; the constant-time comparison is the actual check.
    if api_key is None or not hmac.compare_digest(api_key.key_hash, digest):
        return None
    return api_key


def oauth_access_token_get_by_secret(*, token: str) -> AccessToken | None:
    """The access token whose stored checksum matches `token` (with its user and account), or None.

    Revoked access tokens are deleted by django-oauth-toolkit, so they are simply not found.
    """
    checksum = oauth_token_checksum(token)
    access_token = (
        AccessToken.objects.select_related("user__account__current_group", "application")
        .filter(token_checksum=checksum)
        .first()
    )
    if access_token is None or not hmac.compare_digest(access_token.token_checksum, checksum):
        return None
    return access_token
