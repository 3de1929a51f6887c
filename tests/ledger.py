"""What the ledger says a wallet holds, for tests that hold its balance to it."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Sum

from billing.models import LedgerEntry, Wallet
from billing.selectors import money_exact


def wallet_ledger_sum(*, wallet: Wallet) -> Decimal:
    """The sum of the wallet's ledger entries, at the money places: its balance, if the ledger holds."""
    total = LedgerEntry.objects.filter(wallet=wallet).aggregate(total=Sum("amount"))["total"]
    return money_exact(total)
