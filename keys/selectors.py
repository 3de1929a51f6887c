"""Reads of credentials. Every lookup is by a digest of the secret, never by the secret itself.

Authentication reads a credential through `api_key_snapshot_get` / `oauth_access_token_snapshot_get`:
what it needs of a key or token, as immutable snapshots (the account's and group's included), kept per
process in a `GenerationCache` keyed by that digest (the HMAC of an API key, the SHA-256 checksum of an
OAuth token) while the shared configuration generation is unchanged (core/config_cache.py; the writes
that bump it are registered in keys/apps.py and accounts/apps.py), so a revoked key, a deactivated
user or a changed group is seen by every process at its next request. Without Redis the cache is off
and every request queries.

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
from ipaddress import ip_network
from typing import cast

from django.db.models import QuerySet
from django.utils import timezone
from oauth2_provider.models import AccessToken

from accounts.models import Account, User
from accounts.snapshots import AccountSnapshot
from core.config_cache import GenerationCache
from groups.snapshots import GroupSnapshot
from keys.credentials import NO_KEY_LIMITS, KeyLimits
from keys.models import ApiKey
from keys.secrets import KEY_PREFIX, api_key_hash, api_key_well_formed, oauth_token_checksum


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
    limits: KeyLimits = NO_KEY_LIMITS


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
        limits=api_key_limits_read(api_key=api_key),
    )


def api_key_limits_read(*, api_key: ApiKey) -> KeyLimits:
    """The key's stored limits as the call reads them (the CIDRs parsed once, here)."""
    return KeyLimits(
        budget=api_key.budget,
        budget_period=api_key.budget_period,
        model_ids=frozenset(api_key.model_ids or ()),
        rpm=api_key.rpm,
        tpm=api_key.tpm,
        allowed_networks=tuple(ip_network(cidr, strict=False) for cidr in api_key.allowed_ips or ()),
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


class ApiKeyAmbiguous(LookupError):
    """A prefix matched several keys: `matches` are them, for the operator to pick from."""

    def __init__(self, reference: str, matches: list[ApiKey]) -> None:
        super().__init__(f"{reference!r} matches {len(matches)} keys")
        self.matches = matches


def api_keys_list(*, account: Account | None = None) -> QuerySet[ApiKey]:
    """Keys, newest first, with what an operator's list shows (owner and group); all accounts' keys
    unless `account` is given."""
    keys = ApiKey.objects.select_related("account__user", "group")
    return keys.filter(account=account) if account is not None else keys


def api_key_get_by_secret(*, secret: str) -> ApiKey | None:
    """The key whose secret this is, whatever its state, or None; found by its digest."""
    if not api_key_well_formed(secret):
        return None
    return _api_key_get_by_digest(digest=api_key_hash(secret))


def api_key_get_by_reference(*, reference: str) -> ApiKey:
    """The one key an operator means by `reference`: the whole secret (a leaked key pasted as is), its
    numeric id, or a display prefix (`sk-AbCd1234`, a trailing "…" allowed), whole or the start of one.

    Raises ApiKey.DoesNotExist naming the reference, or ApiKeyAmbiguous when a prefix fits several keys.
    """
    value = reference.strip().rstrip("…")
    if value.isdigit():
        api_key = api_keys_list().filter(pk=int(value)).first()
    elif api_key_well_formed(value):
        api_key = api_key_get_by_secret(secret=value)
    elif value.startswith(KEY_PREFIX) and len(value) > len(KEY_PREFIX):
        matches = list(api_keys_list().filter(prefix__startswith=value))
        if len(matches) > 1:
            raise ApiKeyAmbiguous(reference, matches)
        api_key = matches[0] if matches else None
    else:
        raise ApiKey.DoesNotExist(f"{reference!r} is not a key, a key prefix (sk-…) or a key id")
    if api_key is None:
        raise ApiKey.DoesNotExist(f"no API key matches {reference!r}")
    return api_key


def access_token_live(access_token: AccessToken) -> bool:
    """Whether deleting this token changes a cached answer. An expired token is refused wherever it is
    cached (expiry is checked on every request), so cleartokens' bulk deletions of expired tokens
    invalidate nothing; django-oauth-toolkit revokes a token by deleting its row, and that one does."""
    return access_token.expires > timezone.now()
