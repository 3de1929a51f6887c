from __future__ import annotations

from decimal import Decimal

from django.db.models import Sum

from billing.models import LedgerEntry, Wallet


def wallet_ledger_sum(*, wallet: Wallet) -> Decimal:
    total = LedgerEntry.objects.filter(wallet=wallet).aggregate(total=Sum("amount"))["total"]
    return total if total is not None else Decimal("0")
