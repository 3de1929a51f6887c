"""What request code reads of an account: an immutable snapshot, cached with the credential that acts
for it (keys/selectors.py). Anything else (the wallet, the profile) is read from the database by id."""

from __future__ import annotations

from dataclasses import dataclass

from accounts.models import Account
from groups.snapshots import GroupSnapshot


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    """An account, its user's id, name and state, its current group and the groups it may use."""

    id: int
    user_id: int
    username: str
    user_active: bool
    current_group: GroupSnapshot | None
    allowed_group_ids: frozenset[int]

    @property
    def pk(self) -> int:
        return self.id

    @classmethod
    def from_model(cls, account: Account) -> AccountSnapshot:
        """From an account (its user and current group loaded with it saves their queries); reads its
        allowed groups' ids."""
        user = account.user
        current_group = account.current_group
        return cls(
            id=account.pk,
            user_id=user.pk,
            username=user.get_username(),
            user_active=user.is_active,
            current_group=GroupSnapshot.from_model(current_group) if current_group is not None else None,
            allowed_group_ids=frozenset(account.allowed_groups.values_list("pk", flat=True)),
        )
