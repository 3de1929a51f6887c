"""README.md as a newcomer reads it: its "Use a real provider" section followed word for word (its
commands run as written, the provider behind `responses`), and its facts about `make run` and
`make bench` checked against the files they describe."""

from __future__ import annotations

import io
import json
import re
import shlex
import tomllib
from decimal import Decimal
from pathlib import Path

import pytest
import responses as responses_lib
from django.core.cache import cache
from django.core.management import call_command

from accounts.models import Account
from billing.models import UsageRecord, Wallet

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MANAGE = ".venv/bin/python manage.py "
DUMMY_PROVIDER_KEY = "sk-dummy-provider-key-for-the-readme-test"


def section(title: str) -> str:
    """The README's section under `## title`, up to the next section."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def shell_lines(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


def manage(command: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*shlex.split(command), stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def chat_completion() -> dict:
    return {
        "id": "chatcmpl-readme",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-4.1-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.mark.django_db
def test_the_real_provider_section_works_as_written(client, monkeypatch):
    setup, call = (shell_lines(block) for block in shell_blocks(section("Use a real provider")))
    outputs = []
    for line in setup:
        if line.startswith("export "):
            name = line.removeprefix("export ").split("=", 1)[0]
            assert name == "OPENAI_API_KEY"
            monkeypatch.setenv(name, DUMMY_PROVIDER_KEY)  # a dummy key: the provider is mocked below
            continue
        assert line.startswith(MANAGE), line
        outputs.append((line, *manage(line.removeprefix(MANAGE))))

    commands = {line.removeprefix(MANAGE).split()[0]: (out, err) for line, out, err in outputs}
    assert list(commands) == ["loadconfig", "check", "createaccount", "topup", "createapikey"]
    assert "W001" not in "".join(commands["check"])  # the key variable is set: check passes clean
    assert "no issues" in commands["check"][0]
    check_line = next(line for line, _, _ in outputs if " check " in f"{line} ")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert "openai: (upstreams.W001)" in "".join(manage(check_line.removeprefix(MANAGE)))  # as it says
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_PROVIDER_KEY)
    secret = commands["createapikey"][0].strip().splitlines()[-1]  # "on its last line"
    alice = Account.objects.get(user__username="alice")
    assert Wallet.objects.get(account=alice).balance == Decimal("10.00")

    [curl] = call
    words = shlex.split(curl)
    assert words[:2] == ["curl", "-s"]
    url = words[2]
    headers = dict(words[index + 1].split(": ", 1) for index, word in enumerate(words) if word == "-H")
    body = words[words.index("-d") + 1]
    assert url.startswith("http://127.0.0.1:8000/")
    assert headers["Authorization"].startswith("Bearer sk-")
    headers["Authorization"] = f"Bearer {secret}"  # the key createapikey printed

    with responses_lib.RequestsMock() as provider:
        provider.post("https://api.openai.com/v1/chat/completions", json=chat_completion())
        response = client.post(
            url.removeprefix("http://127.0.0.1:8000"),
            data=body,
            content_type=headers.pop("Content-Type"),
            headers=headers,
        )
        [sent] = provider.calls

    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == "Hi!"
    assert sent.request.headers["Authorization"] == f"Bearer {DUMMY_PROVIDER_KEY}"
    assert json.loads(sent.request.body)["model"] == "gpt-4.1-mini"
    record = UsageRecord.objects.get(account=alice)
    assert (record.status, record.model_id, record.upstream) == (200, "gpt-4.1-mini", "openai")
    # 9 input tokens at ¥2.88 and 3 output tokens at ¥11.52 per million
    assert record.amount == Decimal("0.00006048")
    assert Wallet.objects.get(account=alice).balance == Decimal("10.00") - record.amount


def test_the_top_names_what_make_run_loads():
    demo = tomllib.loads((ROOT / "config" / "demo.toml").read_text(encoding="utf-8"))
    intro = README[: README.index("\n## ")]
    for group in demo["groups"]:
        assert f"`{group['name']}`" in intro, group["name"]
    for model in demo.get("models", []) + demo.get("text_models", []):
        assert f"`{model['id']}`" in intro, model["id"]
    assert "spec" not in intro.lower()  # a document the reader does not have
    assert "two demo keys (images, text) with a curl line each" in intro


def test_make_bench_has_one_duration_and_it_is_the_last_runs():
    said = {
        "README.md": README,
        "Makefile": (ROOT / "Makefile").read_text(encoding="utf-8"),
        "docs/benchmarks.md": (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8"),
    }
    minutes = {name: set(re.findall(r"~(\d+) minutes on 2 cores", text)) for name, text in said.items()}
    assert all(len(found) == 1 for found in minutes.values()), minutes
    [figure] = set.union(*minutes.values())
    last_run = json.loads((ROOT / "bench" / "last-run.json").read_text(encoding="utf-8"))
    assert not last_run["quick"]
    assert abs(int(figure) * 60 - last_run["elapsed_s"]) <= 0.25 * last_run["elapsed_s"]
