"""`purge_notifications`: settled notifications older than the retention go, pending ones stay."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from notifications.models import Notification
from notifications.services import notifications_purge

pytestmark = pytest.mark.django_db


def notification_make(account, *, event_id: str, status: str, age_days: int) -> Notification:
    created = timezone.now() - timedelta(days=age_days)
    return Notification.objects.create(
        event_id=event_id,
        account_id=account.pk,
        kind="balance.below_floor",
        subject="balance",
        threshold=Decimal("1"),
        window=event_id,
        payload={"floor": "1.00000000"},
        created_at=created,
        next_attempt_at=created,
        status=status,
    )


def test_settled_notifications_past_the_retention_are_deleted_and_pending_ones_kept(alice):
    for status in ("delivered", "failed", "skipped", "pending"):
        notification_make(alice, event_id=f"old_{status}", status=status, age_days=91)
        notification_make(alice, event_id=f"new_{status}", status=status, age_days=89)

    deleted = notifications_purge(batch_size=2)

    assert deleted == 3
    assert sorted(Notification.objects.values_list("event_id", flat=True)) == [
        "new_delivered",
        "new_failed",
        "new_pending",
        "new_skipped",
        "old_pending",
    ]


def test_the_command_takes_its_retention_in_days(alice):
    notification_make(alice, event_id="week_old", status="delivered", age_days=8)
    notification_make(alice, event_id="fresh", status="delivered", age_days=1)
    out = StringIO()

    call_command("purge_notifications", "--days", "7", stdout=out)

    assert "Deleted 1 settled notification(s) older than 7 days." in out.getvalue()
    assert list(Notification.objects.values_list("event_id", flat=True)) == ["fresh"]
    with pytest.raises(CommandError):
        call_command("purge_notifications", "--days", "0")
