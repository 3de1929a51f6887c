from __future__ import annotations

from accounts.models import Account


def account_get_by_username(*, username: str) -> Account:
    """The account of a username; raises Account.DoesNotExist with a clear message."""
    try:
        return Account.objects.select_related("user").get(user__username=username)
    except Account.DoesNotExist:
        raise Account.DoesNotExist(f"no account for user {username!r}") from None


def account_get_for_profile(*, account_id: int) -> Account:
    """The account with what GET /v1/me shows: user, current group, allowed groups and wallet."""
    return (
        Account.objects.select_related("user", "current_group", "wallet")
        .prefetch_related("allowed_groups")
        .get(pk=account_id)
    )
