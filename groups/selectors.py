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


def group_get_by_reference(*, reference: str) -> Group:
    """The group an operator names by its name or its numeric id; Group.DoesNotExist naming it."""
    group = Group.objects.filter(name=reference).first()
    if group is None and reference.isdigit():
        group = Group.objects.filter(pk=int(reference)).first()
    if group is None:
        raise Group.DoesNotExist(f"no group named {reference!r} or with that id")
    return group
