from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import Q, Sum
from django.utils import timezone

from billing.models import LedgerEntry, Subscription, Wallet


def wallet_ledger_sum(*, wallet: Wallet) -> Decimal:
    total = LedgerEntry.objects.filter(wallet=wallet).aggregate(total=Sum("amount"))["total"]
    return total if total is not None else Decimal("0")


def subscription_get_active(
    *, account_id: int, group_id: int, at: datetime | None = None
) -> Subscription | None:
    """The account's subscription for the group if it has started and not expired at `at` (now)."""
    moment = at or timezone.now()
    return (
        Subscription.objects.filter(account_id=account_id, group_id=group_id, starts_at__lte=moment)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=moment))
        .first()
    )
