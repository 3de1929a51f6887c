import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from billing.models import LedgerEntry, Wallet
from billing.selectors import wallet_ledger_sum
from keys.models import ApiKey
from keys.secrets import api_key_hash, api_key_well_formed

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_createapikey_prints_a_key_that_matches_the_stored_hash(alice, alpha_group):
    out, err = run(
        "createapikey", "alice", "--group", "Alpha-Image", "--label", "ci", "--expires-in-days", "7"
    )
    secret = out.strip().splitlines()[-1]
    assert api_key_well_formed(secret)
    api_key = ApiKey.objects.get()
    assert api_key.key_hash == api_key_hash(secret)
    assert api_key.label == "ci"
    assert api_key.group == alpha_group
    assert api_key.expires_at is not None
    assert "shown once" in err
    # Never stored in clear: no column of any table holds the secret.
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - table names from introspection
            for row in cursor.fetchall():
                assert all(secret not in str(value) for value in row), table


def test_createapikey_refuses_unknown_user_and_group(alice):
    with pytest.raises(CommandError, match="no account for user 'nobody'"):
        run("createapikey", "nobody", "--group", "Alpha-Image")
    with pytest.raises(CommandError, match="no group named 'Gamma'"):
        run("createapikey", "alice", "--group", "Gamma")
    assert not ApiKey.objects.exists()


def test_topup_writes_a_ledger_entry_and_the_balance_equals_the_ledger_sum(alice):
    out, _ = run("topup", "alice", "2.35", "--note", "invoice 42")
    assert "balance 12.3500" in out
    wallet = Wallet.objects.get(account=alice)
    entry = LedgerEntry.objects.filter(wallet=wallet).latest("id")
    assert entry.kind == "top_up"
    assert entry.amount == Decimal("2.35")
    assert entry.balance_after == Decimal("12.35")
    assert entry.note == "invoice 42"
    assert wallet.balance == wallet_ledger_sum(wallet=wallet) == Decimal("12.35")


@pytest.mark.parametrize("amount", ["-1", "0", "1.000000001", "ten"])
def test_topup_refuses_bad_amounts(alice, amount):
    with pytest.raises(CommandError):
        run("topup", "alice", amount)
    assert LedgerEntry.objects.filter(wallet=alice.wallet).count() == 1
