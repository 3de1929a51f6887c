from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing.ledger import InsufficientFunds, wallet_adjust, wallet_top_up
from billing.models import AppendOnlyError, LedgerEntry, Wallet
from keys.models import ApiKey
from keys.secrets import api_key_hash
from keys.services import api_key_create, api_key_revoke
from tests.ledger import wallet_ledger_sum

pytestmark = pytest.mark.django_db


def test_it_refuses_a_negative_balance_in_the_database(alice):
    with pytest.raises(IntegrityError), transaction.atomic():
        Wallet.objects.filter(account=alice).update(balance=Decimal("-0.0001"))
    assert Wallet.objects.get(account=alice).balance == Decimal("10.0000")


def test_it_refuses_holds_above_the_balance_in_the_database(alice):
    with pytest.raises(IntegrityError), transaction.atomic():
        Wallet.objects.filter(account=alice).update(held=Decimal("10.0001"))


def test_it_refuses_a_charge_entry_with_a_positive_amount(alice):
    with pytest.raises(IntegrityError), transaction.atomic():
        LedgerEntry.objects.create(
            wallet=alice.wallet, kind="charge", amount=Decimal("1"), balance_after=Decimal("11")
        )


def test_it_keeps_ledger_entries_append_only(alice):
    entry = LedgerEntry.objects.get(wallet=alice.wallet)
    entry.note = "rewritten"
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        entry.delete()
    assert LedgerEntry.objects.get(pk=entry.pk).note == ""


def test_it_keeps_balance_equal_to_the_ledger_sum(alice):
    wallet_top_up(account=alice, amount="2.50")
    wallet_adjust(account=alice, amount="-1.25", note="goodwill reversal")
    wallet = Wallet.objects.get(account=alice)
    assert wallet.balance == Decimal("11.25")
    assert wallet_ledger_sum(wallet=wallet) == wallet.balance
    assert list(
        LedgerEntry.objects.filter(wallet=wallet).order_by("id").values_list("balance_after", flat=True)
    ) == [Decimal("10"), Decimal("12.5"), Decimal("11.25")]


def test_it_refuses_an_adjustment_that_would_overdraw(alice):
    with pytest.raises(InsufficientFunds):
        wallet_adjust(account=alice, amount="-10.0001", note="too much")
    assert Wallet.objects.get(account=alice).balance == Decimal("10")
    assert LedgerEntry.objects.filter(wallet=alice.wallet).count() == 1


def test_it_refuses_float_and_overprecise_amounts(alice):
    for bad in (0.15, "0.000000001", "abc", "-1", "0", "NaN"):
        with pytest.raises(ValueError):
            wallet_top_up(account=alice, amount=bad)
    assert LedgerEntry.objects.filter(wallet=alice.wallet).count() == 1


def test_it_stores_api_keys_only_as_prefix_and_keyed_hash(alice, alpha_group):
    api_key, secret = api_key_create(account=alice, group=alpha_group, label="ci")
    stored = ApiKey.objects.filter(pk=api_key.pk).values().get()
    assert stored["key_hash"] == api_key_hash(secret)
    assert stored["prefix"] == secret[:11]
    assert all(secret not in str(value) for value in stored.values())


def test_it_revokes_a_key_once(alice, alpha_group):
    api_key, _ = api_key_create(account=alice, group=alpha_group)
    assert api_key_revoke(api_key=api_key) is True
    assert api_key_revoke(api_key=api_key) is False
    assert ApiKey.objects.get(pk=api_key.pk).status == "revoked"
