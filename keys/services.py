from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from accounts.models import Account
from groups.models import Group
from keys.models import ApiKey
from keys.secrets import api_key_display_prefix, api_key_generate, api_key_hash


def api_key_create(
    *, account: Account, group: Group, label: str = "", expires_at: datetime | None = None
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret. The secret exists only in this return value."""
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
    """Revoke a key; True if this call revoked it, False if it already was."""
    with transaction.atomic():
        changed = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
    if changed:
        api_key.refresh_from_db(fields=["revoked_at"])
    return bool(changed)
