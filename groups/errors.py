"""A group that cannot serve requests, as domain errors (the spec's group states). api.errors maps
each to its HTTP answer."""

from __future__ import annotations

from core.errors import GROUP_DELETED, GROUP_DISABLED, GROUP_UNAVAILABLE, DomainError


class GroupDeleted(DomainError):
    """The serving group has been deleted."""

    code = GROUP_DELETED


class GroupDisabled(DomainError):
    """The serving group has been disabled."""

    code = GROUP_DISABLED


class GroupUnavailable(DomainError):
    """The group is missing, unknown or not active."""

    code = GROUP_UNAVAILABLE
