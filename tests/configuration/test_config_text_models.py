"""[[text_models]] in the configuration file: applied through chat's service, idempotent, and refused
whole (nothing written) for any bad entry."""

from decimal import Decimal
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from chat.models import TextModel
from chat.services import text_model_upsert
from configuration.loader import ConfigError, config_load
from groups.models import Group
from images.models import ImageModel
from tests.factories import image_model_make, text_model_make
from upstreams.models import Upstream

pytestmark = pytest.mark.django_db

VALID = """
[[upstreams]]
name = "openai-main"
kind = "openai"
base_url = "https://provider.example/v1"
api_key_env = "OPENAI_API_KEY"

[[upstreams]]
name = "openai-backup"
kind = "openai"
base_url = "https://backup.example/v1"
api_key_env = "OPENAI_BACKUP_KEY"

[[upstreams]]
name = "demo"
kind = "demo"

[[groups]]
id = 1
name = "Alpha-Image"
image_enabled = true

[[groups]]
id = 3
name = "Alpha-Chat"

[[models]]
id = "alpha-image-2"
group = "Alpha-Image"
price = "0.15"
upstreams = ["demo"]

[[text_models]]
id = "alpha-chat"
group = "Alpha-Chat"
upstreams = ["openai-main", "openai-backup"]
upstream_model = "vendor-name"
input_price = "2.00"
output_price = "8.00"
cached_input_price = "0.50"
cache_write_price = "2.50"
cache_write_1h_price = "4.00"
max_output_tokens = 4096
sticky_seconds = 600
enabled = true

[[text_models]]
id = "alpha-mini"
group = "Alpha-Chat"
upstreams = ["demo"]
input_price = "0.00000150"
output_price = "0.6"
max_output_tokens = 1024
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def snapshot() -> dict:
    rows = {
        model.__name__: sorted(map(repr, model.objects.values()))
        for model in (Upstream, Group, ImageModel, TextModel)
    }
    rows["TextModel.upstreams"] = sorted(
        TextModel.upstreams.through.objects.values_list("textmodel__model_id", "upstream__name")
    )
    return rows


def test_it_creates_text_models_with_their_prices_and_upstreams(tmp_path):
    summary = config_load(path=write(tmp_path, VALID))

    assert summary.counts["text_models"]["created"] == 2
    chat = TextModel.objects.get(model_id="alpha-chat")
    assert chat.group.name == "Alpha-Chat"
    assert chat.upstream_model_name == "vendor-name"
    assert (chat.input_price, chat.output_price) == (Decimal("2.00"), Decimal("8.00"))
    assert (chat.cached_input_price, chat.cache_write_price) == (Decimal("0.50"), Decimal("2.50"))
    assert chat.cache_write_1h_price == Decimal("4.00")
    assert chat.max_output_tokens == 4096
    assert chat.sticky_seconds == 600
    assert chat.enabled
    assert set(chat.upstreams.values_list("name", flat=True)) == {"openai-main", "openai-backup"}


def test_the_optional_keys_default_to_the_id_and_the_input_price(tmp_path):
    config_load(path=write(tmp_path, VALID))

    mini = TextModel.objects.get(model_id="alpha-mini")
    assert mini.upstream_model == "" and mini.upstream_model_name == "alpha-mini"
    assert mini.input_price == Decimal("0.0000015")
    # Stored as none: the cache prices follow the input price, also when it changes later.
    assert mini.cached_input_price is None and mini.cache_write_price is None
    assert mini.cache_write_1h_price is None  # twice the input price
    assert mini.sticky_seconds == 3600  # an hour of sticky routing
    assert mini.enabled


def test_a_rerun_writes_nothing(tmp_path):
    path = write(tmp_path, VALID)
    config_load(path=path)
    before = snapshot()
    updated_at = dict(TextModel.objects.values_list("model_id", "updated_at"))

    summary = config_load(path=path)

    assert not summary.changed
    assert summary.counts["text_models"]["unchanged"] == 2
    assert snapshot() == before
    assert dict(TextModel.objects.values_list("model_id", "updated_at")) == updated_at


def test_it_updates_only_what_changed(tmp_path):
    config_load(path=write(tmp_path, VALID))
    changed = (
        VALID.replace('output_price = "8.00"', 'output_price = "9.5"')
        .replace('upstreams = ["openai-main", "openai-backup"]', 'upstreams = ["openai-main"]')
        .replace("sticky_seconds = 600", "sticky_seconds = 0")
    )

    summary = config_load(path=write(tmp_path, changed))

    assert summary.counts["text_models"]["updated"] == 1
    assert summary.counts["text_models"]["unchanged"] == 1
    chat = TextModel.objects.get(model_id="alpha-chat")
    assert chat.output_price == Decimal("9.5")
    assert chat.sticky_seconds == 0
    assert list(chat.upstreams.values_list("name", flat=True)) == ["openai-main"]


def test_it_leaves_text_models_the_file_does_not_name_alone(tmp_path):
    config_load(path=write(tmp_path, VALID))
    without_mini = VALID[: VALID.index('[[text_models]]\nid = "alpha-mini"')]

    assert not config_load(path=write(tmp_path, without_mini)).changed
    assert TextModel.objects.filter(model_id="alpha-mini").exists()


def test_the_loadconfig_command_reports_text_models(tmp_path, capsys):
    call_command("loadconfig", str(write(tmp_path, VALID)))
    assert "text_models: 2 created, 0 updated, 0 unchanged" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("max_output_tokens = 4096", "max_output_tokens = 4096\nmax_tokens = 1"),
            "text_models[0] (alpha-chat): unknown key 'max_tokens'",
        ),
        (
            (
                'group = "Alpha-Chat"\nupstreams = ["openai-main"',
                'group = "Nope"\nupstreams = ["openai-main"',
            ),
            "text_models[0] (alpha-chat): group 'Nope' is not defined in the file or the database",
        ),
        (
            ('upstreams = ["openai-main", "openai-backup"]', 'upstreams = ["openai-main", "nope"]'),
            "text_models[0] (alpha-chat): upstream 'nope' is not defined in the file or the database",
        ),
        (
            ('upstreams = ["openai-main", "openai-backup"]', "upstreams = []"),
            "text_models[0] (alpha-chat): upstreams must have at least 1 item(s)",
        ),
        (
            ('id = "alpha-mini"', 'id = "alpha-chat"'),
            "text_models: (group, id) ('Alpha-Chat', 'alpha-chat') appears 2 times",
        ),
        (
            ('input_price = "2.00"', "input_price = 2.0"),
            "text_models[0] (alpha-chat): input_price write amounts as strings",
        ),
        (
            ('output_price = "8.00"', 'output_price = "0.000000001"'),
            "text_models[0] (alpha-chat): output_price amount '0.000000001' has more than 8 decimal places",
        ),
        (
            ('cached_input_price = "0.50"', 'cached_input_price = "-0.50"'),
            "text_models[0] (alpha-chat): cached_input_price amount '-0.50' must not be negative",
        ),
        (
            ('cache_write_price = "2.50"', 'cache_write_price = "100000000000000"'),
            "text_models[0] (alpha-chat): cache_write_price amount '100000000000000' is too large",
        ),
        (
            ('output_price = "8.00"\n', ""),
            "text_models[0] (alpha-chat): missing required key 'output_price'",
        ),
        (
            ("max_output_tokens = 4096\n", ""),
            "text_models[0] (alpha-chat): missing required key 'max_output_tokens'",
        ),
        (
            ("max_output_tokens = 4096", "max_output_tokens = 0"),
            "text_models[0] (alpha-chat): max_output_tokens must be at least 1, got 0",
        ),
        (
            ("max_output_tokens = 4096", "max_output_tokens = -5"),
            "text_models[0] (alpha-chat): max_output_tokens must be at least 1, got -5",
        ),
        (
            ("max_output_tokens = 4096", "max_output_tokens = 4096.0"),
            "text_models[0] (alpha-chat): max_output_tokens must be a whole number, got 4096.0",
        ),
        (
            ("max_output_tokens = 4096", 'max_output_tokens = "4096"'),
            "text_models[0] (alpha-chat): max_output_tokens must be a whole number, got '4096'",
        ),
        (
            ("max_output_tokens = 4096", "max_output_tokens = 4294967296"),
            "text_models[0] (alpha-chat): max_output_tokens must be at most 2147483647",
        ),
        (
            ("sticky_seconds = 600", "sticky_seconds = -1"),
            "text_models[0] (alpha-chat): sticky_seconds must be at least 0, got -1",
        ),
        (
            ("sticky_seconds = 600", 'sticky_seconds = "600"'),
            "text_models[0] (alpha-chat): sticky_seconds must be a whole number, got '600'",
        ),
        (
            ('id = "alpha-mini"\ngroup = "Alpha-Chat"', 'id = "alpha-image-2"\ngroup = "Alpha-Image"'),
            "text_models[1] (alpha-image-2): id 'alpha-image-2' is also an image model of group "
            "'Alpha-Image' (in the file or the database)",
        ),
    ],
)
def test_it_refuses_a_bad_entry_and_writes_nothing(tmp_path, change, expected):
    config_load(path=write(tmp_path, VALID))
    before = snapshot()
    old, new = change
    text = VALID.replace(old, new, 1)
    assert text != VALID

    with pytest.raises(ConfigError) as info:
        config_load(path=write(tmp_path, text))

    assert expected in str(info.value)
    assert "nothing applied" in str(info.value)
    assert snapshot() == before


def test_it_refuses_a_bad_entry_in_a_first_load_and_writes_nothing_at_all(tmp_path):
    text = VALID.replace(
        'upstreams = ["openai-main", "openai-backup"]', 'upstreams = ["openai-main", "nope"]'
    )

    with pytest.raises(ConfigError, match="upstream 'nope' is not defined"):
        config_load(path=write(tmp_path, text))

    assert not Upstream.objects.exists() and not Group.objects.exists() and not TextModel.objects.exists()


def test_it_refuses_a_text_model_whose_id_the_group_has_as_an_image_model_in_the_database(tmp_path):
    config_load(path=write(tmp_path, VALID))
    image_model_make(
        model_id="alpha-late",
        group=Group.objects.get(name="Alpha-Chat"),
        upstreams=[Upstream.objects.get(name="demo")],
    )
    before = snapshot()
    text = VALID + '\n[[text_models]]\nid = "alpha-late"\ngroup = "Alpha-Chat"\nupstreams = ["demo"]\n'
    text += 'input_price = "1"\noutput_price = "1"\nmax_output_tokens = 10\n'

    with pytest.raises(ConfigError) as info:
        config_load(path=write(tmp_path, text))

    assert "text_models[2] (alpha-late): id 'alpha-late' is also an image model of group 'Alpha-Chat'" in str(
        info.value
    )
    assert snapshot() == before


IMAGE_ALPHA_MINI = (
    '\n[[models]]\nid = "alpha-mini"\ngroup = "Alpha-Chat"\nprice = "0.1"\nupstreams = ["demo"]\n'
)


def test_it_refuses_an_image_model_whose_id_the_group_has_as_a_text_model_in_the_database(tmp_path):
    config_load(path=write(tmp_path, VALID))
    before = snapshot()
    # The file no longer names the text model alpha-mini; the database still has it.
    text = VALID[: VALID.index('[[text_models]]\nid = "alpha-mini"')] + IMAGE_ALPHA_MINI

    with pytest.raises(ConfigError) as info:
        config_load(path=write(tmp_path, text))

    message = str(info.value)
    assert "models[1] (alpha-mini): id 'alpha-mini' is also a text model of group 'Alpha-Chat'" in message
    assert snapshot() == before


def test_it_reports_a_clash_between_two_entries_of_the_file_once_on_the_text_model(tmp_path):
    with pytest.raises(ConfigError) as info:
        config_load(path=write(tmp_path, VALID + IMAGE_ALPHA_MINI))

    assert info.value.problems == [
        "text_models[1] (alpha-mini): id 'alpha-mini' is also an image model of group 'Alpha-Chat' (in the "
        "file or the database); a model id is unique within its group across image and text models"
    ]
    assert not TextModel.objects.exists() and not ImageModel.objects.exists()


def test_the_same_id_may_be_a_text_model_in_one_group_and_an_image_model_in_another(tmp_path):
    text = VALID.replace('id = "alpha-mini"', 'id = "alpha-image-2"')

    config_load(path=write(tmp_path, text))

    assert TextModel.objects.get(model_id="alpha-image-2").group.name == "Alpha-Chat"
    assert ImageModel.objects.get(model_id="alpha-image-2").group.name == "Alpha-Image"


def test_a_subscription_may_cover_a_text_model_of_its_group(tmp_path):
    text = VALID.replace(
        'id = 3\nname = "Alpha-Chat"', 'id = 3\nname = "Alpha-Chat"\nbilling = "subscription"'
    )
    text += '\n[[accounts]]\nusername = "demo"\nallowed_groups = ["Alpha-Chat"]\n'
    text += '\n[[subscriptions]]\naccount = "demo"\ngroup = "Alpha-Chat"\nmodels = ["alpha-chat", "nope"]\n'

    with pytest.raises(ConfigError) as info:
        config_load(path=write(tmp_path, text))

    assert "model 'nope' is not a model of group 'Alpha-Chat'" in str(info.value)
    assert "'alpha-chat' is not" not in str(info.value)


# --- the service, as the admin and the tests call it --------------------------------------------------


def upsert(group, upstreams, **overrides):
    values = {
        "upstream_model": "",
        "input_price": Decimal("2"),
        "output_price": Decimal("8"),
        "cached_input_price": None,
        "cache_write_price": None,
        "max_output_tokens": 1024,
        "enabled": True,
        **overrides,
    }
    return text_model_upsert(group=group, model_id="alpha-chat", upstreams=upstreams, **values)


def test_the_service_writes_nothing_the_second_time(chat_group, demo_upstream, django_assert_num_queries):
    _, outcome = upsert(chat_group, [demo_upstream])
    assert outcome == "created"

    # Three reads and no write: the image-model clash, the row, its upstream list.
    with django_assert_num_queries(3):
        model, outcome = upsert(chat_group, [demo_upstream], input_price=Decimal("2.00000000"))

    assert outcome == "unchanged"
    assert model.input_price == Decimal("2")


def test_the_service_refuses_no_upstream_and_an_image_models_id(chat_group, demo_upstream):
    with pytest.raises(ValidationError, match="at least one upstream"):
        upsert(chat_group, [])
    image_model_make(model_id="alpha-chat", group=chat_group, upstreams=[demo_upstream])
    with pytest.raises(ValidationError, match="already has an image model called 'alpha-chat'"):
        upsert(chat_group, [demo_upstream])

    assert not TextModel.objects.exists()


@pytest.mark.skipif(
    "anthropic" not in Upstream.Kind.values, reason="the anthropic upstream kind is not here yet"
)
def test_a_text_model_may_be_served_by_openai_and_anthropic_upstreams(tmp_path):
    """A call is translated for each upstream it tries (docs/text.md, "Translation")."""
    text = VALID.replace(
        'name = "openai-backup"\nkind = "openai"', 'name = "openai-backup"\nkind = "anthropic"'
    )

    config_load(path=write(tmp_path, text))

    model = TextModel.objects.get(model_id="alpha-chat")
    assert sorted(model.upstreams.values_list("kind", flat=True)) == ["anthropic", "openai"]


def test_the_image_model_service_refuses_an_id_the_group_has_as_a_text_model(chat_group, demo_upstream):
    text_model_make(model_id="shared-id", group=chat_group, upstreams=[demo_upstream])
    with pytest.raises(ValidationError, match="text model"):
        image_model_make(model_id="shared-id", group=chat_group, upstreams=[demo_upstream])


def test_a_text_model_may_fail_over_across_kinds(tmp_path):
    """A call is translated for each upstream it tries (docs/text.md, "Translation")."""
    text = VALID.replace(
        'upstreams = ["openai-main", "openai-backup"]', 'upstreams = ["openai-main", "demo"]'
    )

    config_load(path=write(tmp_path, text))

    model = TextModel.objects.get(model_id="alpha-chat")
    assert sorted(model.upstreams.values_list("kind", flat=True)) == ["demo", "openai"]
