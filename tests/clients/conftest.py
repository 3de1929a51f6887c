"""The gateway as `make run` sets it up: config/demo.toml loaded (the demo upstream, the Demo-Chat group
with `demo-chat` and `demo-claude`, the demo account and its balance) and the demo text key."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.management import call_command

from accounts.models import Account
from accounts.selectors import account_get_by_username
from keys.management.commands.demo_keys import DEMO_USERNAME, demo_keys_ensure

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
# The demo model of each family: what a recorded body's model is replaced with.
DEMO_MODEL = {"openai": "demo-chat", "anthropic": "demo-claude"}
FAMILY = {
    "/v1/chat/completions": "openai",
    "/v1/responses": "openai",
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic",
}


@dataclass
class Demo:
    account: Account
    key: str  # the demo account's Demo-Chat key


def demo_build(keys_path: Path) -> Demo:
    """What `make run` does before it serves: load config/demo.toml, make the demo keys."""
    call_command("loadconfig", str(ROOT / "config" / "demo.toml"), stdout=io.StringIO())
    keys = demo_keys_ensure(path=keys_path)["keys"]
    return Demo(account=account_get_by_username(username=DEMO_USERNAME), key=keys["Demo-Chat"])


@pytest.fixture
def demo(db, tmp_path) -> Demo:
    cache.clear()  # rate-limit counters of earlier tests: the demo group allows 60 calls a minute
    yield demo_build(tmp_path / ".demo-keys")
    cache.clear()


def corpus_index() -> list[dict]:
    return json.loads((CORPUS / "index.json").read_text())


def corpus_body(entry: dict) -> dict:
    return json.loads((CORPUS / entry["file"]).read_text())
