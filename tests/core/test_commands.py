"""The management commands' whole-number options: a value out of range, or not a number, is the
command's usage error naming the option, before anything runs; the range's ends are taken."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from oauth2_provider.models import AccessToken

from accounts.models import Account
from billing.models import LedgerEntry
from core.commands import BATCH_SIZE_MAX, DAYS_MAX
from keys.models import ApiKey

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]

# command, its other arguments, the option, its lowest and highest values
OPTIONS = [
    ("purge_usage", [], "--days", 1, DAYS_MAX),
    ("purge_usage", [], "--batch-size", 1, BATCH_SIZE_MAX),
    ("purge_notifications", [], "--days", 1, DAYS_MAX),
    ("purge_notifications", [], "--batch-size", 1, BATCH_SIZE_MAX),
    ("purge_images", [], "--older-than-hours", 0, DAYS_MAX * 24),
    ("purge_images", [], "--batch-size", 1, BATCH_SIZE_MAX),
    ("release_stale_holds", [], "--batch-size", 1, BATCH_SIZE_MAX),
    ("deliver_notifications", ["--once"], "--batch-size", 1, BATCH_SIZE_MAX),
    ("createapikey", ["alice", "--group", "Alpha-Image"], "--expires-in-days", 1, DAYS_MAX),
    ("createtoken", ["alice", "--scopes", "profile:read"], "--expires-in-seconds", 1, DAYS_MAX * 86_400),
]


@pytest.mark.parametrize(
    ("command", "args", "option", "low", "high"), OPTIONS, ids=[f"{o[0]} {o[2]}" for o in OPTIONS]
)
@pytest.mark.parametrize("given", ["below", "above", "1" + "0" * 30, "1.5", "x"])
def test_an_option_out_of_its_range_is_a_usage_error_naming_it(
    alice, command, args, option, low, high, given
):
    value = {"below": str(low - 1), "above": str(high + 1)}.get(given, given)

    with pytest.raises(CommandError, match=f"argument {option}: "):
        call_command(command, *args, option, value, stdout=StringIO(), stderr=StringIO())

    assert not ApiKey.objects.exists()
    assert not AccessToken.objects.exists()


@pytest.mark.parametrize(
    ("command", "args", "option", "low", "high"), OPTIONS, ids=[f"{o[0]} {o[2]}" for o in OPTIONS]
)
def test_an_option_at_either_end_of_its_range_is_taken(alice, alpha_group, command, args, option, low, high):
    for value in (low, high):
        call_command(command, *args, option, str(value), stdout=StringIO(), stderr=StringIO())


@pytest.mark.parametrize("given", ["0.05", "3601", "inf", "nan", "x"])
def test_the_delivery_interval_takes_a_finite_number_of_seconds_in_its_range(given):
    with pytest.raises(CommandError, match="argument --interval: "):
        call_command("deliver_notifications", "--once", "--interval", given, stdout=StringIO())

    call_command("deliver_notifications", "--once", "--interval", "0.1", stdout=StringIO())


# command, its arguments with {} where the text goes, and the argument's name in the usage error
TEXTS = [
    ("createaccount", ["{}", "--groups", "Alpha-Image"], "username"),
    ("createaccount", ["dora", "--groups", "{}"], "--groups"),
    ("createaccount", ["dora", "--groups", "Alpha-Image", "--current", "{}"], "--current"),
    ("createaccount", ["dora", "--groups", "Alpha-Image", "--email", "{}"], "--email"),
    ("topup", ["{}", "1.00"], "username"),
    ("topup", ["alice", "{}"], "amount"),
    ("topup", ["alice", "1.00", "--note", "{}"], "--note"),
    ("worker_gone", ["{}"], "owner"),
    ("signin_unlock", ["{}"], "username"),
    ("signin_unlock", ["--address", "{}"], "--address"),
    ("createapikey", ["{}", "--group", "Alpha-Image"], "username"),
    ("createapikey", ["alice", "--group", "{}"], "--group"),
    ("createapikey", ["alice", "--group", "Alpha-Image", "--label", "{}"], "--label"),
    ("createapikey", ["alice", "--group", "Alpha-Image", "--budget", "{}"], "--budget"),
    ("createapikey", ["alice", "--group", "Alpha-Image", "--budget-period", "{}"], "--budget-period"),
    ("createapikey", ["alice", "--group", "Alpha-Image", "--models", "{}"], "--models"),
    ("createapikey", ["alice", "--group", "Alpha-Image", "--allowed-ips", "{}"], "--allowed-ips"),
    ("createtoken", ["{}", "--scopes", "profile:read"], "username"),
    ("createtoken", ["alice", "--scopes", "{}"], "--scopes"),
]


@pytest.mark.parametrize(("command", "args", "name"), TEXTS, ids=[f"{t[0]} {t[2]}" for t in TEXTS])
def test_an_argument_that_is_not_utf8_is_a_usage_error_naming_it(alice, command, args, name):
    # A command line's bytes that are not UTF-8 reach Python as lone surrogates (PEP 383).
    given = [b"\xffdora".decode("utf-8", "surrogateescape") if arg == "{}" else arg for arg in args]

    with pytest.raises(CommandError, match=f"argument {name}: is not valid UTF-8 text"):
        call_command(command, *given, stdout=StringIO(), stderr=StringIO())

    assert Account.objects.count() == 1  # alice
    assert not ApiKey.objects.exists()
    assert not AccessToken.objects.exists()
    assert LedgerEntry.objects.filter(kind="top_up").count() == 1  # alice's fixture


def test_a_command_line_that_is_not_utf8_is_answered_with_usage_not_a_traceback():
    result = subprocess.run(
        [sys.executable, "manage.py", "createaccount", b"\xffdora", "--groups", "Alpha-Image"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2
    assert b"argument username: is not valid UTF-8 text" in result.stderr
    assert b"Traceback" not in result.stderr
