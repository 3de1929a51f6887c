"""Wallets and their append-only ledger: every change of a balance is one ledger entry."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Account, User
from billing.models import LedgerEntry, Wallet
from billing.money import MoneyError, money_parse, money_sql


class InsufficientFunds(MoneyError):
    pass


def wallet_create(*, account: Account) -> Wallet:
    wallet, _ = Wallet.objects.get_or_create(account_id=account.pk)
    return wallet


def wallet_create_on_provision(*, account: Account, **_: object) -> None:
    """Receiver of accounts' `account_provisioned`: an account made by the services gets its wallet."""
    wallet_create(account=account)


def ledger_write(
    *,
    account_id: int,
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
        wallet = Wallet.objects.select_for_update().get(account_id=account_id)
        new_balance = wallet.balance + amount
        if new_balance < wallet.held:
            raise InsufficientFunds(
                f"this would leave the balance at {new_balance}, "
                f"below the {wallet.held} held by calls in flight"
            )
        # update() skips auto_now: the time is set here, so the admin's "updated at" stays true.
        Wallet.objects.filter(pk=wallet.pk).update(
            balance=money_sql(F("balance") + amount), updated_at=timezone.now()
        )
        return LedgerEntry.objects.create(
            wallet_id=wallet.pk,
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
    return ledger_write(
        account_id=account.pk,
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
    return ledger_write(
        account_id=account.pk,
        kind=LedgerEntry.Kind.ADJUSTMENT,
        amount=value,
        reference=reference or "adjustment",
        note=note,
        created_by=created_by,
    )
