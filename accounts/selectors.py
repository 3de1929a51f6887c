from __future__ import annotations

from accounts.models import Account


def account_get_by_username(*, username: str) -> Account:
    """The account of a username; raises Account.DoesNotExist with a clear message."""
    try:
        return Account.objects.select_related("user").get(user__username=username)
    except Account.DoesNotExist:
        raise Account.DoesNotExist(f"no account for user {username!r}") from None
