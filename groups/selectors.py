"""Reads of groups, served from a per-process cache of snapshots.

The entries live in a `GenerationCache` (core/config_cache.py): valid while the shared configuration
generation is unchanged, and every write to a group bumps it after commit, so the next call on every
process reads the new rows. Without Redis every read queries, as the cache is off.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.config_cache import GenerationCache
from groups.models import Group
from groups.snapshots import GroupSnapshot

# One entry: bounded by the configuration, not by what callers send.
_groups: GenerationCache[Mapping[int, GroupSnapshot]] = GenerationCache(name="groups")


def group_get(*, group_id: int) -> GroupSnapshot | None:
    """The group with this id, whatever its status, or None."""
    return _groups.get_or_load("all", _groups_load).get(group_id)


def _groups_load() -> Mapping[int, GroupSnapshot]:
    return MappingProxyType({group.pk: GroupSnapshot.from_model(group) for group in Group.objects.all()})
