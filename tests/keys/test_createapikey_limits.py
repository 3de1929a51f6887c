"""`manage.py createapikey` with a key's own limits: stored as the other surfaces store them
(keys.services `api_key_limits_clean`), each refusal a CommandError naming its flag, nothing made."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from keys.authentication import credential_verify
from keys.models import ApiKey
from tests.factories import image_model_make

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def alpha_models(alpha_model, alpha_group, demo_upstream):
    """Two models of Alpha-Image: alpha-image-2 and alpha-image-mini."""
    return [
        alpha_model,
        image_model_make(model_id="alpha-image-mini", group=alpha_group, upstreams=[demo_upstream]),
    ]


def test_it_creates_a_key_with_every_limit(alice, alpha_models):
    out, err = run(
        "createapikey",
        "alice",
        "--group",
        "Alpha-Image",
        "--budget",
        "5.00",
        "--budget-period",
        "monthly",
        "--models",
        "alpha-image-mini, alpha-image-2",
        "--rpm",
        "60",
        "--tpm",
        "100000",
        "--allowed-ips",
        "10.0.0.0/8,192.168.1.7",
    )

    secret = out.strip().splitlines()[-1]
    api_key = ApiKey.objects.get(account=alice)
    assert (api_key.budget, api_key.budget_period) == (Decimal("5.00"), "monthly")
    assert api_key.model_ids == ["alpha-image-2", "alpha-image-mini"]
    assert (api_key.rpm, api_key.tpm) == (60, 100_000)
    assert api_key.allowed_ips == ["10.0.0.0/8", "192.168.1.7/32"]
    assert credential_verify(secret=secret).limits.rpm == 60  # the key authenticates with them
    assert "shown once" in err


def test_without_limit_flags_the_key_has_none(alice, alpha_group):
    run("createapikey", "alice", "--group", "Alpha-Image")

    api_key = ApiKey.objects.get(account=alice)
    assert (api_key.budget, api_key.budget_period, api_key.model_ids) == (None, "", [])
    assert (api_key.rpm, api_key.tpm, api_key.allowed_ips) == (None, None, [])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--budget", "-1", "--budget-period", "daily"], "--budget: budget must be an amount of 0 or more"),
        (["--budget", "five", "--budget-period", "daily"], "--budget: budget 'five' is not an amount"),
        (["--budget", "5.00"], "--budget-period: A budget needs a budget_period"),
        (["--budget", "5", "--budget-period", "yearly"], "--budget-period: budget_period must be one of"),
        (["--budget-period", "weekly"], "--budget: A budget_period needs a budget"),
        (["--rpm", "0"], "--rpm: rpm must be a whole number of at least 1"),
        (["--tpm", "-3"], "--tpm: tpm must be a whole number of at least 1"),
        (
            ["--allowed-ips", "10.0.0.0/8,not-a-network"],
            "--allowed-ips: 'not-a-network' is not an IP address",
        ),
        (
            ["--models", "alpha-image-2,no-such-model"],
            "--models: no-such-model is not a model of the key's group",
        ),
        (
            ["--models", "beta-imagine-image"],
            "--models: beta-imagine-image is not a model",
        ),  # another group's
    ],
)
def test_a_bad_limit_is_refused_naming_its_flag_and_no_key_is_made(
    alice, alpha_model, beta_model, flags, message
):
    with pytest.raises(CommandError) as refused:
        run("createapikey", "alice", "--group", "Alpha-Image", *flags)

    assert str(refused.value).startswith(message), str(refused.value)
    assert not ApiKey.objects.exists()


def test_a_non_number_rpm_is_refused_by_its_flag(alice, alpha_group):
    with pytest.raises(CommandError, match="--rpm: invalid int value"):
        run("createapikey", "alice", "--group", "Alpha-Image", "--rpm", "sixty")
    assert not ApiKey.objects.exists()
