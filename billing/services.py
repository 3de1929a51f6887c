"""Every write to wallets, the ledger and subscriptions goes through these functions."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import F

from accounts.models import Account, User
from billing.models import LedgerEntry, Subscription, Wallet
from billing.money import MoneyError, money_parse
from groups.models import Group


class InsufficientFunds(MoneyError):
    pass


def wallet_create(*, account: Account) -> Wallet:
    wallet, _ = Wallet.objects.get_or_create(account=account)
    return wallet


def _ledger_write(
    *,
    account: Account,
    kind: str,
    amount: Decimal,
    reference: str,
    note: str,
    created_by: User | None,
) -> LedgerEntry:
    """Move a wallet's balance by `amount` and append the ledger entry, in one short transaction.

    A negative amount only goes through while it leaves balance >= held: money reserved by open holds
    can never be taken away underneath them.
    """
    with transaction.atomic():
        # Lock the wallet row so balance_after is exactly this entry's result, even under concurrency.
        wallet = Wallet.objects.select_for_update().get(account=account)
        new_balance = wallet.balance + amount
        if new_balance < wallet.held:
            raise InsufficientFunds(
                f"this would leave the balance at {new_balance}, "
                f"below the {wallet.held} held by calls in flight"
            )
        Wallet.objects.filter(pk=wallet.pk).update(balance=F("balance") + amount)
        return LedgerEntry.objects.create(
            wallet=wallet,
            kind=kind,
            amount=amount,
            balance_after=new_balance,
            reference=reference,
            note=note,
            created_by=created_by,
        )


def wallet_top_up(
    *,
    account: Account,
    amount: Decimal | str | int,
    note: str = "",
    reference: str = "",
    created_by: User | None = None,
) -> LedgerEntry:
    """Credit a wallet. The amount must be positive."""
    value = money_parse(amount, allow_zero=False)
    return _ledger_write(
        account=account,
        kind=LedgerEntry.Kind.TOP_UP,
        amount=value,
        reference=reference or "top-up",
        note=note,
        created_by=created_by,
    )


def wallet_adjust(
    *,
    account: Account,
    amount: Decimal | str | int,
    note: str,
    reference: str = "",
    created_by: User | None = None,
) -> LedgerEntry:
    """A signed correction by staff; a note saying why is required."""
    value = money_parse(amount, allow_negative=True, allow_zero=False)
    if not note.strip():
        raise MoneyError("an adjustment needs a note saying why")
    return _ledger_write(
        account=account,
        kind=LedgerEntry.Kind.ADJUSTMENT,
        amount=value,
        reference=reference or "adjustment",
        note=note,
        created_by=created_by,
    )


def subscription_upsert(
    *,
    account: Account,
    group: Group,
    daily_limit: Decimal | None,
    weekly_limit: Decimal | None,
    monthly_limit: Decimal | None,
    total_limit: Decimal | None,
    starts_at: datetime,
    expires_at: datetime | None,
) -> tuple[Subscription, bool]:
    """Create or update the account's subscription for a group; returns (subscription, changed)."""
    values = {
        "daily_limit": daily_limit,
        "weekly_limit": weekly_limit,
        "monthly_limit": monthly_limit,
        "total_limit": total_limit,
        "starts_at": starts_at,
        "expires_at": expires_at,
    }
    subscription = Subscription.objects.filter(account=account, group=group).first()
    if subscription is None:
        return Subscription.objects.create(account=account, group=group, **values), True
    changed = [name for name, value in values.items() if getattr(subscription, name) != value]
    for name in changed:
        setattr(subscription, name, values[name])
    if changed:
        subscription.save(update_fields=changed)
    return subscription, bool(changed)
