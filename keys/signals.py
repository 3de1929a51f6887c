"""Cached credentials (keys/selectors.py) follow every change to API keys, OAuth access tokens and
OAuth applications: each receiver bumps the configuration generation once the write commits, so every
process reads the credential again at its next request.

Connected by KeysConfig.ready(). Users and accounts have theirs in accounts/signals.py, groups in
groups/apps.py. `QuerySet.update()` sends no signal: the services that use one on these models bump
themselves (`api_key_revoke`); `QuerySet.delete()` does send post_delete for every row.

Refresh tokens need no receiver: they authenticate nothing under /v1, and revoking one (directly, by
rotation or by family) deletes its access token, which is what invalidates.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_application_model

from core.config_cache import config_generation_bump_on_commit
from keys.models import ApiKey

# Saves that touch only these columns change no authentication answer (api_key_mark_used keeps its own
# per-process mark of last_used_at).
API_KEY_FIELDS_NOT_CACHED = frozenset({"last_used_at"})


def _api_key_saved(*, created: bool, update_fields: frozenset[str] | None, **_: Any) -> None:
    if created:
        return  # unknown until now, and unknown secrets are never cached
    if update_fields is not None and update_fields <= API_KEY_FIELDS_NOT_CACHED:
        return
    # Revocation, expiry, group or label changed: every process must read the key again after commit.
    config_generation_bump_on_commit()


def _updated(*, created: bool, **_: Any) -> None:
    if created:
        return  # a new row cannot be in any cache yet
    # An access token's scope or expiry, or an application's name (the label of its tokens'
    # credentials) may have changed: every process must read them again after commit.
    config_generation_bump_on_commit()


def _deleted(**_: Any) -> None:
    # A deleted key, or an application taking its tokens with it: refuse them everywhere after commit.
    config_generation_bump_on_commit()


def _access_token_deleted(*, instance: Any, **_: Any) -> None:
    if instance.expires <= timezone.now():
        # Already refused as expired wherever it is cached (expiry is checked on every request), so
        # cleartokens' bulk deletions of expired tokens invalidate nothing.
        return
    # Revocation: django-oauth-toolkit revokes an access token by deleting its row.
    config_generation_bump_on_commit()


def credential_receivers_connect() -> None:
    access_token = get_access_token_model()
    application = get_application_model()
    post_save.connect(_api_key_saved, sender=ApiKey, dispatch_uid="keys_apikey_saved")
    post_delete.connect(_deleted, sender=ApiKey, dispatch_uid="keys_apikey_deleted")
    post_save.connect(_updated, sender=access_token, dispatch_uid="keys_accesstoken_saved")
    post_delete.connect(_access_token_deleted, sender=access_token, dispatch_uid="keys_accesstoken_deleted")
    post_save.connect(_updated, sender=application, dispatch_uid="keys_application_saved")
    post_delete.connect(_deleted, sender=application, dispatch_uid="keys_application_deleted")
