from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from accounts.models import Account
from billing.models import LedgerEntry, Subscription, Wallet
from chat.models import TextModel
from configuration.loader import ConfigError, config_load
from groups.models import Group
from images.models import ImageModel
from upstreams.models import Upstream

pytestmark = pytest.mark.django_db
DEMO = Path(__file__).resolve().parents[2] / "config" / "demo.toml"

VALID = """
[[upstreams]]
name = "alpha-main"
kind = "openai"
base_url = "https://provider.example/v1"
api_key_env = "ALPHA_API_KEY"
timeout_seconds = 120
priority = 0
weight = 1

[[groups]]
id = 1
name = "Alpha-Image"
image_enabled = true
billing = "balance"
allow_group_override = true
rpm = 60
concurrency = 4

[[groups]]
id = 2
name = "Beta-API"
image_enabled = true
billing = "subscription"

[[models]]
id = "alpha-image-2"
group = "Alpha-Image"
price = "0.15"
upstreams = ["alpha-main"]
upstream_model = "vendor-model-name"
sizes = ["1024x1024", "1024x1792", "1792x1024"]
qualities = ["standard", "hd"]
output_formats = ["png", "jpeg", "webp"]
output_compression = [0, 100]
max_n = 4
edits = true
stream = false
default_response_format = "b64_json"

[[accounts]]
username = "demo"
balance = "10.00"
allowed_groups = ["Alpha-Image", "Beta-API"]
current_group = "Alpha-Image"

[[subscriptions]]
account = "demo"
group = "Beta-API"
daily_limit = "1.00"
weekly_limit = "5.00"
monthly_limit = "20.00"
total_limit = "100.00"
expires_at = "2027-12-31T00:00:00Z"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def snapshot() -> dict:
    return {
        model.__name__: sorted(map(repr, model.objects.values()))
        for model in (Upstream, Group, ImageModel, TextModel, Account, Wallet, LedgerEntry, Subscription)
    }


def test_it_applies_the_issue_example(tmp_path):
    summary = config_load(path=write(tmp_path, VALID))
    assert summary.changed
    model = ImageModel.objects.get(model_id="alpha-image-2")
    assert model.price == Decimal("0.15")
    assert model.upstream_model_name == "vendor-model-name"
    assert list(model.upstreams.values_list("name", flat=True)) == ["alpha-main"]
    assert model.output_compression_range == (0, 100)
    upstream = Upstream.objects.get(name="alpha-main")
    assert upstream.api_key_env == "ALPHA_API_KEY"
    account = Account.objects.get(user__username="demo")
    assert account.wallet.balance == Decimal("10.00")
    assert account.current_group.name == "Alpha-Image"
    assert set(account.allowed_groups.values_list("id", flat=True)) == {1, 2}
    subscription = Subscription.objects.get(account=account)
    assert subscription.daily_limit == Decimal("1.00")
    assert subscription.expires_at.year == 2027


def test_a_groups_tpm_is_loaded_like_its_rpm(tmp_path):
    config_load(path=write(tmp_path, VALID.replace("rpm = 60\n", "rpm = 60\ntpm = 100000\n", 1)))

    assert Group.objects.get(name="Alpha-Image").tpm == 100_000
    assert Group.objects.get(name="Beta-API").tpm == 0  # unset: unlimited

    config_load(path=write(tmp_path, VALID))  # taken out of the file: back to unlimited
    assert Group.objects.get(name="Alpha-Image").tpm == 0


def test_a_negative_tpm_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"groups\[0\] \(Alpha-Image\): tpm"):
        config_load(path=write(tmp_path, VALID.replace("rpm = 60\n", "rpm = 60\ntpm = -1\n", 1)))
    assert not Group.objects.filter(name="Alpha-Image").exists()


def test_it_changes_nothing_when_applied_twice(tmp_path):
    path = write(tmp_path, VALID)
    config_load(path=path)
    before = snapshot()
    summary = config_load(path=path)
    assert not summary.changed
    assert snapshot() == before
    # The opening balance was credited once.
    assert LedgerEntry.objects.count() == 1


def test_the_loadconfig_command_is_idempotent_on_the_demo_file(capsys):
    call_command("loadconfig", str(DEMO))
    before = snapshot()
    call_command("loadconfig", str(DEMO))
    assert "no changes" in capsys.readouterr().out
    assert snapshot() == before
    assert ImageModel.objects.count() == 7
    prices = dict(ImageModel.objects.values_list("model_id", "price"))
    assert prices["alpha-image-2.5-sunburst"] == Decimal("0.15")
    assert prices["beta-imagine-image-quality"] == Decimal("0.02")
    assert set(Group.objects.values_list("name", flat=True)) == {"Alpha-Image", "Beta-API", "Demo-Chat"}
    text_prices = {m.model_id: (m.input_price, m.output_price) for m in TextModel.objects.all()}
    assert text_prices == {
        "demo-chat": (Decimal("2.00"), Decimal("8.00")),
        "demo-claude": (Decimal("3.00"), Decimal("15.00")),
    }
    assert set(TextModel.objects.values_list("upstreams__kind", flat=True)) == {"demo"}
    demo = Account.objects.get(user__username="demo")
    assert set(demo.allowed_groups.values_list("name", flat=True)) == {"Alpha-Image", "Beta-API", "Demo-Chat"}


def test_it_updates_only_what_changed(tmp_path):
    config_load(path=write(tmp_path, VALID))
    summary = config_load(path=write(tmp_path, VALID.replace('price = "0.15"', 'price = "0.20"')))
    assert summary.counts["models"]["updated"] == 1
    assert summary.counts["groups"]["unchanged"] == 2
    assert ImageModel.objects.get(model_id="alpha-image-2").price == Decimal("0.20")
    # Changing the file's opening balance does not credit the existing account again.
    config_load(path=write(tmp_path, VALID.replace('balance = "10.00"', 'balance = "99.00"')))
    assert Wallet.objects.get(account__user__username="demo").balance == Decimal("10.00")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("max_n = 4", 'max_n = 4\nszes = ["1x1"]'), "models[0] (alpha-image-2): unknown key 'szes'"),
        (('price = "0.15"', "price = 0.15"), "models[0] (alpha-image-2): price write amounts as strings"),
        (('upstreams = ["alpha-main"]', 'upstreams = ["nope"]'), "upstream 'nope' is not defined"),
        (('group = "Alpha-Image"\nprice', 'group = "Gamma"\nprice'), "group 'Gamma' is not defined"),
        (('billing = "subscription"', 'billing = "credit"'), "groups[1] (Beta-API): billing must be one of"),
        (('current_group = "Alpha-Image"', 'current_group = "Nope"'), "current_group 'Nope' must be one of"),
        (('sizes = ["1024x1024"', 'sizes = ["big"'), "sizes must be <width>x<height>"),
        (("output_compression = [0, 100]", "output_compression = [0, 101]"), "output_compression the range"),
        (('api_key_env = "ALPHA_API_KEY"', 'api_key_env = "sk-live-secret"'), "not valid (an environment"),
        (("[[subscriptions]]", "[[whatever]]\nx = 1\n[[subscriptions]]"), "unknown section [whatever]"),
        (('expires_at = "2027-12-31T00:00:00Z"', 'expires_at = "2027-12-31"'), "must carry a time zone"),
        (
            ('name = "alpha-main"', 'name = "alpha-main"\nsecret = "x"'),
            "upstreams[0] (alpha-main): unknown key",
        ),
        (
            ('id = 2\nname = "Beta-API"', 'name = "Beta-API"'),
            "groups[1] (Beta-API): missing required key 'id'",
        ),
        (("id = 2\n", "id = 1\n"), "groups: id 1 appears 2 times"),
        (('billing = "subscription"', 'billing = "balance"'), "is billed by balance, not by subscription"),
    ],
)
def test_it_rejects_a_bad_config_whole(tmp_path, change, expected):
    old, new = change
    text = VALID.replace(old, new, 1)
    assert text != VALID
    with pytest.raises(ConfigError) as info:
        config_load(path=write(tmp_path, text))
    message = str(info.value)
    assert str(tmp_path / "gateway.toml") in message
    assert expected in message
    assert "nothing applied" in message
    # Nothing is half-applied: not even the valid entries before the bad one.
    assert not Upstream.objects.exists()
    assert not Group.objects.exists()
    assert not Account.objects.exists()


def test_it_rejects_a_file_that_is_not_toml(tmp_path):
    with pytest.raises(CommandError, match="not valid TOML"):
        call_command("loadconfig", str(write(tmp_path, "[[upstreams]\nname=")))


def test_it_rolls_back_when_applying_fails_midway(tmp_path):
    # The group name is taken by another id in the database: the whole file is refused.
    config_load(path=write(tmp_path, VALID))
    clashing = VALID.replace("id = 2\n", "id = 3\n").replace('price = "0.15"', 'price = "0.30"')
    with pytest.raises(ConfigError, match="name already belongs to group id 2"):
        config_load(path=write(tmp_path, clashing))
    assert ImageModel.objects.get(model_id="alpha-image-2").price == Decimal("0.15")


def test_it_applies_per_upstream_retry_settings_and_refuses_bad_ones(tmp_path):
    text = VALID.replace("weight = 1\n", "weight = 1\nmax_retries = 2\ncircuit_cooldown_seconds = 12.5\n", 1)
    config_load(path=write(tmp_path, text))
    upstream = Upstream.objects.get(name="alpha-main")
    assert (upstream.max_retries, upstream.circuit_cooldown_seconds, upstream.retry_base_seconds) == (
        2,
        12.5,
        None,
    )
    assert not config_load(path=write(tmp_path, text)).changed
    with pytest.raises(ConfigError, match="circuit_threshold must be at least 1"):
        config_load(path=write(tmp_path, text.replace("max_retries = 2", "circuit_threshold = 0")))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("weight = 1\n", "weight = 1\ncircuit_threshold = 100000\n"),
            "upstreams[0] (alpha-main): circuit_threshold must be at most 32767, got 100000",
        ),
        (
            ("priority = 0", "priority = 2147483648"),
            "upstreams[0] (alpha-main): priority must be at most 2147483647",
        ),
        (("rpm = 60", "rpm = 4294967296"), "groups[0] (Alpha-Image): rpm must be at most 2147483647"),
        (("max_n = 4", "max_n = 40000"), "models[0] (alpha-image-2): max_n must be at most 32767"),
        (
            ("output_compression = [0, 100]", "output_compression = [0, 70000]"),
            "models[0] (alpha-image-2): output_compression[1] must be at most 32767",
        ),
        (('name = "Beta-API"', f'name = "{"B" * 101}"'), "name must be at most 100 characters"),
        (
            ('upstream_model = "vendor-model-name"', f'upstream_model = "{"m" * 201}"'),
            "models[0] (alpha-image-2): upstream_model must be at most 200 characters",
        ),
        (
            ('base_url = "https://provider.example/v1"', f'base_url = "https://p.example/{"x" * 500}"'),
            "upstreams[0] (alpha-main): base_url must be at most 500 characters",
        ),
        (
            ('base_url = "https://provider.example/v1"', 'base_url = "ftp://provider.example/v1"'),
            "upstreams[0] (alpha-main): base_url 'ftp://provider.example/v1' is not valid (an http(s) URL)",
        ),
        (
            ('price = "0.15"', 'price = "-0.15"'),
            "models[0] (alpha-image-2): price amount '-0.15' must not be",
        ),
        (
            ('price = "0.15"', 'price = "0.000000001"'),
            "models[0] (alpha-image-2): price amount '0.000000001' has more than",
        ),
        (('daily_limit = "1.00"', 'daily_limit = "100000000000000"'), "(demo@Beta-API): daily_limit amount"),
        (
            ('username = "demo"', 'username = "demo"\nemail = "not-an-address"'),
            "email 'not-an-address' is not an",
        ),
        (("timeout_seconds = 120", "timeout_seconds = 0"), "timeout_seconds must be at least 1, got 0"),
    ],
)
def test_it_refuses_a_value_its_column_cannot_hold_and_writes_nothing(tmp_path, change, expected):
    config_load(path=write(tmp_path, VALID))
    before = snapshot()
    old, new = change
    text = VALID.replace(old, new, 1)
    assert text != VALID
    with pytest.raises(ConfigError) as info:
        config_load(path=write(tmp_path, text))
    message = str(info.value)
    assert str(tmp_path / "gateway.toml") in message
    assert expected in message
    assert snapshot() == before
