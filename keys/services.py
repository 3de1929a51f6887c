"""Every write to API keys and OAuth tokens goes through these functions.

Authentication serves credentials from per-process caches (keys/selectors.py) that are valid while the
shared configuration generation is unchanged. A write that changes an authentication answer must bump
the generation once committed, so every process refuses a revoked credential at its very next request:
saves and deletes do so through the receivers keys/apps.py registers (core/config_registry.py); a
`QuerySet.update()` sends no signal, so the service that uses one bumps explicitly (`api_key_revoke`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken, set_token_value
from oauth2_provider.settings import oauth2_settings

from accounts.models import Account, User
from core.config_cache import config_generation_bump_on_commit
from groups.models import Group
from keys.credentials import SCOPES, STAFF_ONLY_SCOPES
from keys.models import ApiKey
from keys.secrets import (
    api_key_display_prefix,
    api_key_generate,
    api_key_hash,
    oauth_access_token_generate,
)
from keys.selectors import LastUsedMark

# `last_used_at` is written at most this often per key: a write per request would turn every API
# call into a row update (lock + WAL) on a hot row.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiKeyGroupNotAllowed(ValueError):
    """The group asked for is not among the account's allowed groups."""


def api_key_create(
    *, account: Account, group: Group, label: str = "", expires_at: datetime | None = None
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret. The secret exists only in this return value.

    The group must be one of the account's allowed groups (ApiKeyGroupNotAllowed otherwise): a key
    serves only while it is (keys.group_access), so a key for any other group could never be used."""
    if not account.allowed_groups.filter(pk=group.pk).exists():
        raise ApiKeyGroupNotAllowed(
            f"the group {group.name!r} is not among the groups {account.user.get_username()} may use"
        )
    secret = api_key_generate()
    api_key = ApiKey.objects.create(
        account=account,
        group=group,
        label=label,
        prefix=api_key_display_prefix(secret),
        key_hash=api_key_hash(secret),
        expires_at=expires_at,
    )
    return api_key, secret


def api_key_revoke(*, api_key: ApiKey) -> bool:
    """Revoke a key; True if this call revoked it, False if it already was.

    Takes effect on every process at its next request: the configuration generation is bumped once the
    revocation is committed, which drops every process's cached credentials.
    """
    with transaction.atomic():
        # Conditional UPDATE: of concurrent revocations exactly one sets revoked_at.
        changed = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if changed:
            # update() sends no post_save: invalidate the cached credentials ourselves, after commit.
            config_generation_bump_on_commit()
    if changed:
        api_key.refresh_from_db(fields=["revoked_at"])
    return bool(changed)


def api_key_mark_used(*, api_key_id: int, last_used: LastUsedMark, now: datetime | None = None) -> bool:
    """Record that the key was used; writes at most once per LAST_USED_RESOLUTION. True if written.

    `last_used` is this process's latest known `last_used_at` of the key, shared by its threads (it
    lives in the cached credential), so a busy key costs a statement about once a minute per process,
    never one per request; the stored time only ever moves forward.
    """
    moment = now or timezone.now()
    threshold = moment - LAST_USED_RESOLUTION
    known = last_used.value
    if known is not None and known > threshold:
        return False  # recent enough, as far as this process knows: no query at all
    # Conditional UPDATE: of many concurrent requests (threads, processes) only one writes, and it can
    # only move the time forward.
    written = (
        ApiKey.objects.filter(pk=api_key_id)
        .filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=threshold))
        .update(last_used_at=moment)
    )
    if written:
        last_used.advance(moment)
        return True
    # Another thread or process wrote it within the minute: learn when, so that this process waits for
    # that minute to pass instead of trying again on every request (a deleted row: wait a minute too).
    stored = ApiKey.objects.filter(pk=api_key_id).values_list("last_used_at", flat=True).first()
    last_used.advance(stored or moment)
    return False


def oauth_scopes_validate(*, scopes: Iterable[str]) -> frozenset[str]:
    """The scopes as a set; ValueError naming any unknown scope."""
    wanted = frozenset(scopes)
    unknown = sorted(wanted - SCOPES.keys())
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
    return wanted


def oauth_token_create(
    *, account: Account, scopes: Iterable[str], expires_in_seconds: int | None = None
) -> tuple[AccessToken, str]:
    """Issue an access token for the account's user outside the OAuth flow (operators: createtoken).

    Returns the token row and its secret; only the secret's SHA-256 is stored.
    """
    wanted = oauth_scopes_validate(scopes=scopes)
    staff_only = sorted(wanted & STAFF_ONLY_SCOPES)
    if staff_only and not account.user.is_staff:
        raise ValueError(f"only staff users may hold the scope(s) {', '.join(staff_only)}")
    lifetime = (
        expires_in_seconds if expires_in_seconds is not None else oauth2_settings.ACCESS_TOKEN_EXPIRE_SECONDS
    )
    if lifetime < 1:
        raise ValueError("expires_in_seconds must be at least 1")
    secret = oauth_access_token_generate()
    access_token = AccessToken(
        user=account.user,
        application=None,
        scope=" ".join(sorted(wanted)),
        expires=timezone.now() + timedelta(seconds=lifetime),
    )
    # Leaves `token` blank and stores the checksum only (COMPLIANT_BCP_RFC9700_TOKEN_STORAGE).
    set_token_value(access_token, secret)
    access_token.save(force_insert=True)
    return access_token, secret


def oauth_token_revoke(*, access_token: AccessToken) -> bool:
    """Revoke an access token and the refresh token issued with it; True if anything was revoked.

    django-oauth-toolkit revokes an access token by deleting its row; the deletion bumps the
    configuration generation after commit (core/config_cache.py), so the next request carrying it is
    refused by every process.
    """
    with transaction.atomic():
        refresh_tokens = list(
            RefreshToken.objects.filter(access_token_id=access_token.pk, revoked__isnull=True)
        )
        for refresh_token in refresh_tokens:
            refresh_token.revoke()  # also deletes the access token
        deleted, _ = AccessToken.objects.filter(pk=access_token.pk).delete()
    return bool(refresh_tokens) or bool(deleted)


def oauth_application_revoke_for_user(*, user_id: int, application_id: int | None) -> int:
    """Revoke everything an OAuth application holds for a user: its access tokens (expired ones too, so
    nothing a refresh could revive remains) and its live refresh tokens. `application_id=None` covers
    tokens an operator issued with createtoken. Returns how many tokens were revoked.

    Every access token is deleted, row by row, so the receivers keys/apps.py registers invalidate the
    cached credentials on every process once this commits."""
    revoked = 0
    with transaction.atomic():
        for access_token in AccessToken.objects.filter(user_id=user_id, application_id=application_id):
            revoked += oauth_token_revoke(access_token=access_token)
        for refresh_token in RefreshToken.objects.filter(
            user_id=user_id, application_id=application_id, revoked__isnull=True
        ):
            refresh_token.revoke()
            revoked += 1
    return revoked


audit_logger = logging.getLogger("gateway.audit")


def api_key_create_by_staff(
    *, staff: User, account: Account, group: Group, label: str = "", expires_at: datetime | None = None
) -> tuple[ApiKey, str]:
    """`api_key_create` on a staff user's behalf (the provisioning API), logged to `gateway.audit`."""
    api_key, secret = api_key_create(account=account, group=group, label=label, expires_at=expires_at)
    audit_logger.info(
        "staff=%s action=api_key_create target=api_key:%s account=%s group=%s prefix=%s",
        staff.get_username(),
        api_key.pk,
        account.pk,
        group.pk,
        api_key.prefix,
    )
    return api_key, secret


def api_key_revoke_by_staff(*, staff: User, api_key: ApiKey) -> bool:
    """`api_key_revoke` on a staff user's behalf, logged to `gateway.audit` (also when it already was)."""
    revoked = api_key_revoke(api_key=api_key)
    audit_logger.info(
        "staff=%s action=api_key_revoke target=api_key:%s account=%s prefix=%s changed=%s",
        staff.get_username(),
        api_key.pk,
        api_key.account_id,
        api_key.prefix,
        revoked,
    )
    return revoked
