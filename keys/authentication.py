"""Verifying a credential: manual API keys and OAuth access tokens.

`credential_verify` returns the `Credential` for a secret, or raises a domain error of keys/errors.py
(api/errors.py maps it): malformed, bad checksum, unknown: `CredentialInvalid` (401
`invalid_api_key`); revoked: `CredentialRevoked` (401 `revoked_api_key`); expired:
`CredentialExpired` (401 `expired_api_key`). Reading the credential from a request's headers is
api/authentication.py's (DRF).

Known credentials are read from a per-process cache that every relevant write invalidates on every
process (keys/selectors.py); the Credential holds the cached snapshots of the account and group.

Nothing here logs or echoes a credential.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from keys.credentials import Credential
from keys.errors import (
    CredentialExpired,
    CredentialInvalid,
    CredentialRevoked,
)
from keys.secrets import (
    KEY_PREFIX,
    OAUTH_ACCESS_TOKEN_PREFIX,
    api_key_display_prefix,
    api_key_well_formed,
    oauth_access_token_well_formed,
)
from keys.selectors import api_key_snapshot_get, oauth_access_token_snapshot_get
from keys.services import api_key_mark_used


def _invalid(message: str) -> CredentialInvalid:
    return CredentialInvalid(message)


def credential_verify(*, secret: str, now: datetime | None = None) -> Credential:
    """The Credential for a secret from a header; raises CredentialInvalid, CredentialRevoked or
    CredentialExpired (401) when it is not usable.

    The shape and checksum are checked before any database access.
    """
    moment = now or timezone.now()
    if secret.startswith(OAUTH_ACCESS_TOKEN_PREFIX):
        return _oauth_token_verify(token=secret, now=moment)
    if secret.startswith(KEY_PREFIX):
        return _api_key_verify(secret=secret, now=moment)
    raise _invalid("The API key is malformed: keys start with 'sk-', OAuth access tokens with 'sk_oauth_'.")


def _api_key_verify(*, secret: str, now: datetime) -> Credential:
    if not api_key_well_formed(secret):
        raise _invalid("The API key is malformed or mistyped (its checksum does not match).")
    # Cached per process while the configuration generation is unchanged (keys/selectors.py); the
    # expiry is compared with the clock here, on every request.
    api_key = api_key_snapshot_get(secret=secret)
    if api_key is None:
        raise _invalid("The API key is not valid.")
    if api_key.revoked_at is not None:
        raise CredentialRevoked("The API key has been revoked.")
    if api_key.expires_at is not None and api_key.expires_at <= now:
        raise CredentialExpired("The API key has expired.")
    _require_active_user(active=api_key.account.user_active)
    api_key_mark_used(api_key_id=api_key.id, last_used=api_key.last_used, now=now)
    return Credential(
        kind="api_key",
        id=api_key.id,
        account=api_key.account,
        bound_group=api_key.group,
        scopes=frozenset(),
        label=api_key.label,
        prefix=api_key_display_prefix(secret),
        limits=api_key.limits,
    )


def _oauth_token_verify(*, token: str, now: datetime) -> Credential:
    if not oauth_access_token_well_formed(token):
        raise _invalid("The OAuth access token is malformed or mistyped (its checksum does not match).")
    access_token = oauth_access_token_snapshot_get(token=token)
    if access_token is None:
        # Revoked access tokens are deleted, so "revoked" and "never existed" look the same here.
        raise _invalid("The OAuth access token is not valid or has been revoked.")
    if access_token.expires <= now:
        raise CredentialExpired("The OAuth access token has expired.")
    if not access_token.has_user:
        raise _invalid("The OAuth access token does not act for a user.")
    _require_active_user(active=access_token.user_active)
    account = access_token.account
    if account is None:
        raise _invalid("The OAuth access token's user has no account.")
    return Credential(
        kind="oauth",
        id=access_token.id,
        account=account,
        bound_group=None,
        scopes=access_token.scopes,
        label=access_token.label,
    )


def _require_active_user(*, active: bool) -> None:
    if not active:
        raise _invalid("The credential belongs to a deactivated user.")
