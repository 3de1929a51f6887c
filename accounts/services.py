from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import IntegrityError, transaction

from accounts.models import Account, User
from billing.ledger import wallet_create
from groups.models import Group

audit_logger = logging.getLogger("gateway.audit")


def account_create(
    *, username: str, email: str = "", password: str | None = None, is_staff: bool = False
) -> Account:
    """Create a user with its account and (empty) wallet. Without a password the user cannot sign in."""
    with transaction.atomic():
        user = User(username=username, email=email, is_staff=is_staff)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        user.save()
        return account_create_for_user(user=user)


def account_create_for_user(*, user: User) -> Account:
    """Give an existing user (e.g. one made with createsuperuser) its account and wallet."""
    with transaction.atomic():
        account, _ = Account.objects.get_or_create(user=user)
        wallet_create(account=account)
        return account


def account_set_groups(
    *, account: Account, allowed_groups: Iterable[Group], current_group: Group | None
) -> bool:
    """Set the allowed groups and the current group (which must be one of them). True if anything changed.

    Cached credentials hold the account (accounts/signals.py): each change invalidates them on every
    process once this commits."""
    allowed = {group.pk: group for group in allowed_groups}
    if current_group is not None and current_group.pk not in allowed:
        raise ValueError(f"current group {current_group.name!r} is not among the allowed groups")
    changed = False
    # One transaction: no request sees the new allowed groups with the old current group (or one
    # that is no longer allowed), and the invalidations run after both are committed.
    with transaction.atomic():
        existing = set(account.allowed_groups.values_list("pk", flat=True))
        if existing != set(allowed):
            account.allowed_groups.set(allowed.values())
            changed = True
        new_current = current_group.pk if current_group is not None else None
        if account.current_group_id != new_current:
            account.current_group = current_group
            account.save(update_fields=["current_group"])
            changed = True
    return changed


class AccountExists(ValueError):
    """The username is taken."""


class AccountGroupInactive(ValueError):
    """A group asked for is not active (disabled, unavailable or deleted): no account is opened in it."""

    def __init__(self, group: Group) -> None:
        super().__init__(
            f"the group {group.name!r} is {group.get_status_display().lower()}: accounts are opened in "
            "active groups only (activate it first)"
        )
        self.group = group


def account_open(
    *, username: str, email: str = "", allowed_groups: Iterable[Group], current_group: Group | None
) -> Account:
    """A new user with its account, wallet and groups, all or nothing (operators: createaccount; staff:
    the provisioning API, through account_create_with_groups).

    The user has no usable password until one is set (changepassword, or the console's reset).
    AccountExists for a username in use (also when a concurrent request took it first);
    AccountGroupInactive when a group is not active: the account could neither make a key in it nor
    call through it, so opening it there is a mistake to report, not to carry out. (An existing
    account keeps a group an operator disables later: that is what disabling a group is for.)"""
    allowed_groups = list(allowed_groups)
    for group in allowed_groups:
        if group.status != Group.Status.ACTIVE:
            raise AccountGroupInactive(group)
    try:
        with transaction.atomic():
            if User.objects.filter(username=username).exists():
                raise AccountExists(f"a user named {username!r} already exists")
            account = account_create(username=username, email=email)
            account_set_groups(account=account, allowed_groups=allowed_groups, current_group=current_group)
            return account
    except IntegrityError:
        raise AccountExists(f"a user named {username!r} already exists") from None


def account_create_with_groups(
    *, staff: User, username: str, email: str = "", groups: Iterable[Group], current_group: Group | None
) -> Account:
    """`account_open` for the provisioning API, logged to `gateway.audit` with the staff user who asked."""
    allowed = list(groups)
    account = account_open(
        username=username, email=email, allowed_groups=allowed, current_group=current_group
    )
    audit_logger.info(
        "staff=%s action=account_create target=account:%s username=%s groups=%s",
        staff.get_username(),
        account.pk,
        username,
        ",".join(str(group.pk) for group in allowed),
    )
    return account
