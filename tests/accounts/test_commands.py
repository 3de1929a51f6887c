import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from accounts.models import Account, User
from billing.models import LedgerEntry, Wallet
from keys.models import ApiKey
from keys.secrets import api_key_hash, api_key_well_formed
from keys.services import api_key_create, api_key_revoke
from tests.ledger import wallet_ledger_sum

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
    assert out.strip() == "Topped up alice by ¥2.35; balance ¥12.35"
    wallet = Wallet.objects.get(account=alice)
    entry = LedgerEntry.objects.filter(wallet=wallet).latest("id")
    assert entry.kind == "top_up"
    assert entry.amount == Decimal("2.35")
    assert entry.balance_after == Decimal("12.35")
    assert entry.note == "invoice 42"
    assert wallet.balance == wallet_ledger_sum(wallet=wallet) == Decimal("12.35")


def test_topup_prints_amounts_as_the_console_shows_them(alice):
    # Not money_str's fixed places (0.00002400), and a per-token sum is never rounded away.
    out, _ = run("topup", "alice", "0.000024")
    assert out.strip() == "Topped up alice by ¥0.000024; balance ¥10.000024"
    assert Wallet.objects.get(account=alice).balance == Decimal("10.000024")


@pytest.mark.parametrize("amount", ["-1", "0", "1.000000001", "ten"])
def test_topup_refuses_bad_amounts(alice, amount):
    with pytest.raises(CommandError):
        run("topup", "alice", amount)
    assert LedgerEntry.objects.filter(wallet=alice.wallet).count() == 1


def make_key(account, group, label=""):
    return api_key_create(account=account, group=group, label=label)


def test_listapikeys_shows_every_key_and_its_state_but_never_a_secret(alice, bob, alpha_group):
    alice_key, alice_secret = make_key(alice, alpha_group, "laptop")
    bob_key, bob_secret = make_key(bob, alpha_group, "ci")
    api_key_revoke(api_key=bob_key)

    everyone, _ = run("listapikeys")
    only_alice, _ = run("listapikeys", "alice")

    assert "PREFIX" in everyone and "LAST USED" in everyone
    assert f"{alice_key.prefix}…" in everyone and f"{bob_key.prefix}…" in everyone
    assert "revoked" in everyone and "active" in everyone and "Alpha-Image" in everyone
    assert f"{alice_key.prefix}…" in only_alice and bob_key.prefix not in only_alice
    assert alice_secret not in everyone and bob_secret not in everyone


def test_listapikeys_refuses_an_unknown_user(alice):
    with pytest.raises(CommandError, match="no account for user 'nobody'"):
        run("listapikeys", "nobody")


@pytest.mark.parametrize("by", ["secret", "prefix", "prefix…", "id"])
def test_revokeapikey_revokes_a_key_named_by_secret_prefix_or_id(alice, alpha_group, by):
    api_key, secret = make_key(alice, alpha_group)
    reference = {
        "secret": secret,
        "prefix": api_key.prefix,
        "prefix…": f"{api_key.prefix}…",
        "id": str(api_key.pk),
    }[by]

    out, _ = run("revokeapikey", reference)
    again, _ = run("revokeapikey", reference)

    assert ApiKey.objects.get().status == "revoked"
    assert out.startswith(f"Revoked {api_key.prefix}…")
    assert "already revoked" in again
    assert secret not in out


def test_revokeapikey_refuses_a_prefix_of_several_keys_and_lists_them(alice, alpha_group):
    first, _ = make_key(alice, alpha_group, "one")
    second, _ = make_key(alice, alpha_group, "two")
    ApiKey.objects.filter(pk=first.pk).update(prefix="sk-AAAA1111")
    ApiKey.objects.filter(pk=second.pk).update(prefix="sk-AAAA2222")

    with pytest.raises(CommandError) as refused:
        run("revokeapikey", "sk-AAAA")

    message = str(refused.value)
    assert "matches 2 keys" in message
    assert "sk-AAAA1111…" in message and "sk-AAAA2222…" in message
    assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()
    run("revokeapikey", "sk-AAAA2")
    assert ApiKey.objects.get(pk=second.pk).status == "revoked"


@pytest.mark.parametrize("reference", ["sk-NOPE0000", "999999", "hello"])
def test_revokeapikey_refuses_an_unknown_key(alice, reference):
    with pytest.raises(CommandError, match=reference):
        run("revokeapikey", reference)


def test_createaccount_makes_an_account_with_its_wallet_and_groups(alpha_group, beta_group):
    out, _ = run("createaccount", "dora", "--groups", "Beta-API", "1", "--email", "dora@example.com")

    account = Account.objects.get(user__username="dora")
    assert set(account.allowed_groups.all()) == {alpha_group, beta_group}
    assert account.current_group == beta_group
    assert account.user.email == "dora@example.com"
    assert not account.user.has_usable_password()
    assert Wallet.objects.get(account=account).balance == Decimal("0")
    assert "changepassword dora" in out


def test_createaccount_takes_the_current_group_from_current(alpha_group, beta_group):
    run("createaccount", "dora", "--groups", "Beta-API", "Alpha-Image", "--current", "Alpha-Image")

    assert Account.objects.get(user__username="dora").current_group == alpha_group


def test_createaccount_refuses_unknown_groups_a_foreign_current_and_a_taken_name(
    alice, alpha_group, beta_group
):
    with pytest.raises(CommandError, match="no group named 'Nope'"):
        run("createaccount", "dora", "--groups", "Nope")
    with pytest.raises(CommandError, match="not among --groups"):
        run("createaccount", "dora", "--groups", "Alpha-Image", "--current", "Beta-API")
    with pytest.raises(CommandError, match="already exists"):
        run("createaccount", "alice", "--groups", "Alpha-Image")


@pytest.mark.parametrize("status", ["disabled", "unavailable", "deleted"])
def test_createaccount_refuses_a_group_that_is_not_active(alpha_group, beta_group, status):
    beta_group.status = status
    beta_group.save(update_fields=["status"])

    with pytest.raises(
        CommandError,
        match=f"the group 'Beta-API' is {status}: accounts are opened in active",
    ):
        run("createaccount", "dora", "--groups", "Alpha-Image", "Beta-API")

    assert not Account.objects.filter(user__username="dora").exists()
    assert not User.objects.filter(username="dora").exists()
    assert not Account.objects.filter(user__username="dora").exists()
