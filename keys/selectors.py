"""Reads of credentials. Every lookup is by a digest of the secret, never by the secret itself.

Authentication reads a credential through `api_key_snapshot_get` / `oauth_access_token_snapshot_get`:
what it needs of a key or token, as immutable snapshots (the account's and group's included), kept per
process in a `GenerationCache` keyed by that digest (the HMAC of an API key, the SHA-256 checksum of an
OAuth token) while the shared configuration generation is unchanged (core/config_cache.py, which also
lists every write that bumps it), so a revoked key, a deactivated user or a changed group is seen by
every process at its next request. Without Redis the cache is off and every request queries.

- Only credentials that exist are cached: an unknown secret costs its query every time, so random
  keys cannot fill the memory (and a key created later is found at once).
- Expiry is a time, not a decision: `expires_at` / `expires` are cached and compared with the clock
  on every request.
"""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from oauth2_provider.models import AccessToken

from accounts.models import Account, User
from accounts.snapshots import AccountSnapshot
from core.config_cache import GenerationCache
from groups.snapshots import GroupSnapshot
from keys.models import ApiKey
from keys.secrets import api_key_hash, oauth_token_checksum


class LastUsedMark:
    """This process's latest known `last_used_at` of one key, shared by the threads serving it.

    It only moves forward, so a thread that read an older time can never set it back."""

    __slots__ = ("_lock", "_value")

    def __init__(self, value: datetime | None) -> None:
        self._value = value
        self._lock = threading.Lock()

    @property
    def value(self) -> datetime | None:
        return self._value

    def advance(self, value: datetime) -> None:
        with self._lock:
            if self._value is None or value > self._value:
                self._value = value


@dataclass(frozen=True, eq=False)
class ApiKeySnapshot:
    """What authentication needs of one API key, as read at one configuration generation.

    `last_used` is the one mutable part, on purpose: this process's mark of the key's last use."""

    id: int
    label: str
    expires_at: datetime | None
    revoked_at: datetime | None
    account: AccountSnapshot
    group: GroupSnapshot
    last_used: LastUsedMark = field(repr=False)


@dataclass(frozen=True, eq=False)
class AccessTokenSnapshot:
    """What authentication needs of one OAuth access token, as read at one configuration generation.

    `account` is None when the token acts for no user or for a user without an account (such tokens
    are refused and never cached)."""

    id: int
    expires: datetime
    scopes: frozenset[str]
    label: str
    has_user: bool
    user_active: bool
    account: AccountSnapshot | None


class _Uncached(Exception):
    """Raised by a loader to return `value` without storing it in the cache (a control-flow signal)."""

    def __init__(self, value: object) -> None:
        self.value = value


# Keyed by digest; bounded (GenerationCache clears itself when full), and only real credentials enter.
_api_keys: GenerationCache[ApiKeySnapshot] = GenerationCache(name="api_keys")
_access_tokens: GenerationCache[AccessTokenSnapshot] = GenerationCache(name="oauth_access_tokens")


def api_key_snapshot_get(*, secret: str) -> ApiKeySnapshot | None:
    """The authentication view of the key `secret`, or None; served from the per-process cache while
    the configuration generation is unchanged."""
    digest = api_key_hash(secret)
    try:
        return _api_keys.get_or_load(digest, lambda: _api_key_snapshot_load(digest=digest))
    except _Uncached as uncached:
        return cast("ApiKeySnapshot | None", uncached.value)


def oauth_access_token_snapshot_get(*, token: str) -> AccessTokenSnapshot | None:
    """The authentication view of the access token `token`, or None; served from the per-process
    cache while the configuration generation is unchanged."""
    checksum = oauth_token_checksum(token)
    try:
        return _access_tokens.get_or_load(checksum, lambda: _access_token_snapshot_load(checksum=checksum))
    except _Uncached as uncached:
        return cast("AccessTokenSnapshot | None", uncached.value)


def _api_key_get_by_digest(*, digest: str) -> ApiKey | None:
    api_key = (
        ApiKey.objects.select_related("account__user", "account__current_group", "group")
        .filter(key_hash=digest)
        .first()
    )
    # The index lookup finds the row; the constant-time comparison is the actual check.
    if api_key is None or not hmac.compare_digest(api_key.key_hash, digest):
        return None
    return api_key


def _access_token_get_by_checksum(*, checksum: str) -> AccessToken | None:
    access_token = (
        AccessToken.objects.select_related("user__account__current_group", "application")
        .filter(token_checksum=checksum)
        .first()
    )
    if access_token is None or not hmac.compare_digest(access_token.token_checksum, checksum):
        return None
    return access_token


def _api_key_snapshot_load(*, digest: str) -> ApiKeySnapshot:
    api_key = _api_key_get_by_digest(digest=digest)
    if api_key is None:
        raise _Uncached(None)  # unknown secrets are never cached: no memory for random keys
    return ApiKeySnapshot(
        id=api_key.pk,
        label=api_key.label,
        expires_at=api_key.expires_at,
        revoked_at=api_key.revoked_at,
        account=AccountSnapshot.from_model(api_key.account),
        group=GroupSnapshot.from_model(api_key.group),
        last_used=LastUsedMark(api_key.last_used_at),
    )


def _access_token_snapshot_load(*, checksum: str) -> AccessTokenSnapshot:
    access_token = _access_token_get_by_checksum(checksum=checksum)
    if access_token is None:
        raise _Uncached(None)  # revoked (deleted) or unknown: never cached
    user: User | None = access_token.user
    try:
        account = user.account if user is not None else None
    except Account.DoesNotExist:
        account = None
    snapshot = AccessTokenSnapshot(
        id=access_token.pk,
        expires=access_token.expires,
        scopes=frozenset(access_token.scope.split()),
        label=access_token.application.name if access_token.application_id else "",
        has_user=user is not None,
        user_active=user is not None and user.is_active,
        account=AccountSnapshot.from_model(account) if account is not None else None,
    )
    if account is None:
        # Refused today, but creating the account bumps nothing (no cached answer can depend on a new
        # row), so this answer must not be kept.
        raise _Uncached(snapshot)
    return snapshot


def api_keys_list_for_account(*, account_id: int) -> list[ApiKey]:
    """An account's keys, newest first, with their groups (revoked and expired ones included)."""
    return list(ApiKey.objects.filter(account_id=account_id).select_related("group"))
