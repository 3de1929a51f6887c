"""What request code reads of a group: an immutable snapshot, shared by every thread of a process
through the configuration cache (core/config_cache.py)."""

from __future__ import annotations

from dataclasses import dataclass

from groups.models import Group


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A group's row as read at one configuration generation. `status` and `billing` are the stored
    strings, so they compare equal to `Group.Status.*` / `Group.Billing.*`."""

    id: int
    name: str
    status: str
    image_enabled: bool
    billing: str
    allow_group_override: bool
    rpm: int
    concurrency: int
    tpm: int = 0

    @property
    def pk(self) -> int:
        return self.id

    @classmethod
    def from_model(cls, group: Group) -> GroupSnapshot:
        return cls(
            id=group.pk,
            name=group.name,
            status=str(group.status),
            image_enabled=group.image_enabled,
            billing=str(group.billing),
            allow_group_override=group.allow_group_override,
            rpm=group.rpm,
            concurrency=group.concurrency,
            tpm=group.tpm,
        )
