"""Reads of an account's notifications, for its owner's console page."""

from __future__ import annotations

from django.db.models import QuerySet

from notifications.models import Notification

RECENT = 50


def notifications_recent(*, account_id: int, limit: int = RECENT) -> QuerySet[Notification]:
    """The account's latest events, newest first, with how their delivery went."""
    return Notification.objects.filter(account_id=account_id).order_by("-created_at", "-pk")[:limit]
