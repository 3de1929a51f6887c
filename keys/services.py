"""Every write to API keys and OAuth tokens goes through these functions.

Authentication serves credentials from per-process caches (keys/selectors.py) that are valid while the
shared configuration generation is unchanged. A write that changes an authentication answer must bump
the generation once committed, so every process refuses a revoked credential at its very next request:
saves and deletes do so through the receivers keys/apps.py registers (core/config_registry.py); a
`QuerySet.update()` sends no signal, so the service that uses one bumps explicitly (`api_key_revoke`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from ipaddress import ip_network
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken, set_token_value
from oauth2_provider.settings import oauth2_settings

from accounts.models import Account, User
from core.config_cache import config_generation_bump_on_commit
from core.modelutils import MONEY, POSITIVE_INTEGER_MAX
from groups.models import Group
from keys.credentials import SCOPES, STAFF_ONLY_SCOPES
from keys.errors import KeyLimitsInvalid
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


# The most networks and model ids one key may list: a key's limits are read on every call.
KEY_LIST_MAX = 100


@dataclass(frozen=True)
class ApiKeyLimitsInput:
    """A key's limits as every surface (console, admin, provisioning API, createapikey) hands them to
    `api_key_limits_clean`: each None (or empty) when unset."""

    budget: Decimal | str | None = None
    budget_period: str = ""
    model_ids: list[str] = field(default_factory=list)
    rpm: int | None = None
    tpm: int | None = None
    allowed_ips: list[str] = field(default_factory=list)


def api_key_limits_clean(*, limits: ApiKeyLimitsInput) -> dict[str, Any]:
    """The limits as ApiKey's column values, or KeyLimitsInvalid naming the field.

    A budget is a non-negative amount with at most the ledger's decimal places, and comes with a
    period (`daily`, `weekly`, `monthly`, `total`); a period needs a budget. `rpm` and `tpm` are
    whole numbers from 1 to the most their columns hold. `allowed_ips` are CIDR networks or single
    addresses, kept in their canonical form (`10.0.0.0/8`, `2001:db8::/32`). Lists are kept sorted
    and without repeats. Whether each model id is one of the group's models is the surface's check
    (the catalogue is an endpoint's)."""
    budget = _budget_clean(limits.budget)
    period = (limits.budget_period or "").strip().lower()
    if period and period not in ApiKey.BudgetPeriod.values:
        raise KeyLimitsInvalid(
            f"budget_period must be one of {', '.join(ApiKey.BudgetPeriod.values)}.", param="budget_period"
        )
    if budget is not None and not period:
        raise KeyLimitsInvalid("A budget needs a budget_period.", param="budget_period")
    if period and budget is None:
        raise KeyLimitsInvalid("A budget_period needs a budget.", param="budget")
    model_ids = sorted({str(model_id).strip() for model_id in limits.model_ids if str(model_id).strip()})
    if len(model_ids) > KEY_LIST_MAX:
        raise KeyLimitsInvalid(f"A key may list at most {KEY_LIST_MAX} models.", param="models")
    networks = []
    for text in limits.allowed_ips:
        try:
            networks.append(ip_network(str(text).strip(), strict=False))
        except ValueError:
            raise KeyLimitsInvalid(
                f"{text!r} is not an IP address or a CIDR network (e.g. 10.0.0.0/8).", param="allowed_ips"
            ) from None
    if len(networks) > KEY_LIST_MAX:
        raise KeyLimitsInvalid(f"A key may list at most {KEY_LIST_MAX} networks.", param="allowed_ips")
    for name, value in (("rpm", limits.rpm), ("tpm", limits.tpm)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise KeyLimitsInvalid(f"{name} must be a whole number of at least 1.", param=name)
        if value > POSITIVE_INTEGER_MAX:  # ApiKey.rpm and .tpm are PositiveIntegerFields
            raise KeyLimitsInvalid(f"{name} must be at most {POSITIVE_INTEGER_MAX}.", param=name)
    return {
        "budget": budget,
        "budget_period": period,
        "model_ids": model_ids,
        "rpm": limits.rpm,
        "tpm": limits.tpm,
        "allowed_ips": sorted({str(network) for network in networks}),
    }


def _budget_clean(value: Decimal | str | None) -> Decimal | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise KeyLimitsInvalid(f'budget {value!r} is not an amount such as "5.00".', param="budget") from None
    places = MONEY["decimal_places"]
    whole_digits = MONEY["max_digits"] - places
    if not amount.is_finite() or amount < 0:
        raise KeyLimitsInvalid("budget must be an amount of 0 or more.", param="budget")
    if amount.adjusted() >= whole_digits or amount != amount.quantize(Decimal(1).scaleb(-places)):
        raise KeyLimitsInvalid(
            f"budget must have at most {places} decimal places and {whole_digits} digits before them.",
            param="budget",
        )
    return amount


# Which model ids a group offers is known to the endpoint families that own the models, which the
# domain does not import: api registers its check (api.catalog.key_models_check) when it is ready.
ApiKeyModelsCheck = Callable[..., None]  # called as check(group_id=..., model_ids=...)
_models_checks: list[ApiKeyModelsCheck] = []


def api_key_models_check_register(check: ApiKeyModelsCheck) -> None:
    """Install the check `api_key_models_check` runs (api/apps.py registers api.catalog's)."""
    if check not in _models_checks:
        _models_checks.append(check)


def api_key_models_check(*, group_id: int, model_ids: Iterable[str]) -> None:
    """KeyLimitsInvalid (param `models`) naming each of `model_ids` that is not a model of the group.

    Every surface that sets a key's `models` runs it before `api_key_create` / `api_key_limits_set`:
    a key listing a model its group does not offer would be refused that model on every call."""
    if not _models_checks:
        raise RuntimeError("no key models check is registered (the api app registers it when ready)")
    for check in _models_checks:
        check(group_id=group_id, model_ids=model_ids)


def api_key_limits_set(*, api_key: ApiKey, limits: ApiKeyLimitsInput) -> list[str]:
    """Store the key's limits (cleaned by `api_key_limits_clean`); returns the fields that changed.

    The save bumps the configuration generation after commit (keys/apps.py), so every process applies
    the new limits from its next call. Spend already counted in the key's windows stays counted."""
    values = api_key_limits_clean(limits=limits)
    changed = [name for name, value in values.items() if getattr(api_key, name) != value]
    for name in changed:
        setattr(api_key, name, values[name])
    if changed:
        api_key.save(update_fields=changed)
    return changed


def api_key_create(
    *,
    account: Account,
    group: Group,
    label: str = "",
    expires_at: datetime | None = None,
    limits: ApiKeyLimitsInput | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret. The secret exists only in this return value.

    The group must be one of the account's allowed groups (ApiKeyGroupNotAllowed otherwise): a key
    serves only while it is (keys.group_access), so a key for any other group could never be used.
    `limits`: the key's own limits (`api_key_limits_clean`; KeyLimitsInvalid before anything is
    written)."""
    limit_values = api_key_limits_clean(limits=limits or ApiKeyLimitsInput())
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
        **limit_values,
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
    *,
    staff: User,
    account: Account,
    group: Group,
    label: str = "",
    expires_at: datetime | None = None,
    limits: ApiKeyLimitsInput | None = None,
) -> tuple[ApiKey, str]:
    """`api_key_create` on a staff user's behalf (the provisioning API), logged to `gateway.audit`."""
    api_key, secret = api_key_create(
        account=account, group=group, label=label, expires_at=expires_at, limits=limits
    )
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


def api_key_limits_set_by_staff(*, staff: User, api_key: ApiKey, limits: ApiKeyLimitsInput) -> list[str]:
    """`api_key_limits_set` on a staff user's behalf (the provisioning API), logged to `gateway.audit`
    with the fields that changed (their values are the key's, read back from it)."""
    changed = api_key_limits_set(api_key=api_key, limits=limits)
    audit_logger.info(
        "staff=%s action=api_key_limits_set target=api_key:%s account=%s prefix=%s changed=%s",
        staff.get_username(),
        api_key.pk,
        api_key.account_id,
        api_key.prefix,
        ",".join(changed) or "-",
    )
    return changed
