"""The provider examples in config/examples/ load with `loadconfig`, twice without a change, together
without a clash, and ask each upstream kind only for what its adapter serves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command

from chat.models import TextModel
from groups.models import Group
from images.models import ImageModel
from upstreams.models import Upstream
from upstreams.providers import adapter_serves
from upstreams.providers.base import (
    CHAT_COMPLETIONS,
    IMAGES_EDIT,
    IMAGES_GENERATE,
    IMAGES_STREAM,
    MESSAGES,
    MESSAGES_COUNT_TOKENS,
    RESPONSES,
)

pytestmark = pytest.mark.django_db
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"
FILES = sorted(EXAMPLES.glob("*.toml"))
# What each provider's file declares: its upstream kind and key variable.
PROVIDERS = {
    "openai.toml": ("openai", "OPENAI_API_KEY"),
    "gemini.toml": ("gemini", "GEMINI_API_KEY"),
    "anthropic.toml": ("anthropic", "ANTHROPIC_API_KEY"),
    "deepseek.toml": ("openai-compatible", "DEEPSEEK_API_KEY"),
}
# What each kind serves natively (an `openai-compatible` model's /v1/messages is translated).
TEXT_OPERATIONS = {
    "openai": (CHAT_COMPLETIONS, RESPONSES),
    "openai-compatible": (CHAT_COMPLETIONS,),
    "anthropic": (MESSAGES, MESSAGES_COUNT_TOKENS),
}


def snapshot() -> list:
    return [
        sorted(Upstream.objects.values_list("name", "kind", "base_url", "api_key_env", "timeout_seconds")),
        sorted(Group.objects.values_list("id", "name", "status", "image_enabled", "rpm", "concurrency")),
        sorted(ImageModel.objects.values_list("model_id", "group__name", "price", "upstream_model")),
        sorted(
            TextModel.objects.values_list(
                "model_id", "group__name", "upstream_model", "input_price", "output_price"
            )
        ),
    ]


def load(path: Path, capsys) -> str:
    call_command("loadconfig", str(path))
    return capsys.readouterr().out


def test_there_is_one_example_per_provider():
    assert {path.name for path in FILES} == set(PROVIDERS)


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_it_applies_each_example_and_then_changes_nothing(path: Path, capsys):
    assert path.read_text().startswith("# EXAMPLE:")
    assert f"{path}: applied" in load(path, capsys)
    before = snapshot()
    second = load(path, capsys)
    assert f"{path}: no changes" in second
    assert not re.search(r"[1-9]\d* (created|updated)", second)
    assert snapshot() == before

    kind, key_env = PROVIDERS[path.name]
    upstreams = list(Upstream.objects.all())
    assert [(u.kind, u.api_key_env) for u in upstreams] == [(kind, key_env)]
    assert upstreams[0].base_url.startswith("https://")
    assert ImageModel.objects.exists() or TextModel.objects.exists()


def test_it_applies_every_example_together(capsys):
    for path in FILES:
        assert f"{path}: applied" in load(path, capsys)
    for path in FILES:
        assert f"{path}: no changes" in load(path, capsys)
    assert set(Upstream.objects.values_list("kind", flat=True)) == {
        "openai",
        "gemini",
        "anthropic",
        "openai-compatible",
    }
    assert Group.objects.count() == 5


def test_it_asks_each_kind_only_for_operations_its_adapter_serves(capsys):
    for path in FILES:
        load(path, capsys)
    for model in ImageModel.objects.prefetch_related("upstreams"):
        needed = [IMAGES_GENERATE]
        needed += [IMAGES_EDIT] if model.edits_supported else []
        needed += [IMAGES_STREAM] if model.stream_supported else []
        for upstream in model.upstreams.all():
            for operation in needed:
                assert adapter_serves(kind=upstream.kind, operation=operation), (model.model_id, operation)
    for model in TextModel.objects.prefetch_related("upstreams"):
        for upstream in model.upstreams.all():
            for operation in TEXT_OPERATIONS[upstream.kind]:
                assert adapter_serves(kind=upstream.kind, operation=operation), (model.model_id, operation)
    kinds = {
        model.model_id: {u.kind for u in model.upstreams.all()} for model in ImageModel.objects.all()
    } | {model.model_id: {u.kind for u in model.upstreams.all()} for model in TextModel.objects.all()}
    assert kinds["gpt-image-1"] == kinds["gpt-4.1"] == {"openai"}
    assert kinds["gemini-2.5-flash-image"] == {"gemini"}
    assert kinds["claude-sonnet-4-5"] == {"anthropic"}
    assert kinds["deepseek-chat"] == {"openai-compatible"}
