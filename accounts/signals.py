"""Cached credentials (keys/selectors.py) hold the user (is_active) and the account (current group) a
key or token acts for: each receiver here bumps the configuration generation once a change to them
commits, so every process reads them again at its next request. Connected by AccountsConfig.ready().

No bump for new rows (no cached credential can refer to them) or for saves that touch only columns no
answer depends on (sign-ins write `last_login`). `QuerySet.update()` on these models sends no signal:
code that uses one must call `config_generation_bump_on_commit()` itself (none does today).
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save

from accounts.models import Account, User
from core.config_cache import config_generation_bump_on_commit

USER_FIELDS_NOT_CACHED = frozenset({"last_login"})


def _user_saved(*, created: bool, update_fields: frozenset[str] | None, **_: Any) -> None:
    if created:
        return
    if update_fields is not None and update_fields <= USER_FIELDS_NOT_CACHED:
        return  # a sign-in: nothing a credential answer depends on
    # Deactivation (is_active) above all: refuse the user's keys and tokens everywhere after commit.
    config_generation_bump_on_commit()


def _account_saved(*, created: bool, **_: Any) -> None:
    if created:
        return
    # current_group serves OAuth tokens: every process must read it again after commit.
    config_generation_bump_on_commit()


def _deleted(**_: Any) -> None:
    # A deleted user or account: whatever credential of theirs is cached must be refused everywhere.
    config_generation_bump_on_commit()


def _allowed_groups_changed(*, action: str, **_: Any) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        # The groups an account may use decide its OAuth calls.
        config_generation_bump_on_commit()


def credential_receivers_connect() -> None:
    post_save.connect(_user_saved, sender=User, dispatch_uid="accounts_user_saved")
    post_delete.connect(_deleted, sender=User, dispatch_uid="accounts_user_deleted")
    post_save.connect(_account_saved, sender=Account, dispatch_uid="accounts_account_saved")
    post_delete.connect(_deleted, sender=Account, dispatch_uid="accounts_account_deleted")
    # The through model's signal covers both sides (account.allowed_groups and group.accounts).
    m2m_changed.connect(
        _allowed_groups_changed,
        sender=Account.allowed_groups.through,
        dispatch_uid="accounts_account_allowed_groups_changed",
    )
