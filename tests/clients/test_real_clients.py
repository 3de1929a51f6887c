"""Real clients against a live gateway on the demo upstream, set up as `make run` sets it up
(config/demo.toml, the demo text key): Claude Code, Codex CLI, Qwen Code and opencode run the
recipes of docs/text.md word for word; Qwen Code, opencode, the openai and anthropic SDKs, LangChain,
the OpenAI Agents SDK and the Vercel AI SDK run a tool loop (a call answered with a tool call, the
tool's result sent back, a final answer in text).

Every HTTP call a client makes is billed once: one usage record with status 200, one ledger charge
of its amount, and the wallet down by their sum.

On PostgreSQL the gateway is gunicorn in its own process (the module's rows committed, flushed when
it ends); on SQLite, as `make run` serves, the test server of pytest-django. The agent CLIs and the
AI SDK are skipped only when they are not installed (`npm ci --prefix tests/clients/node`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import openai
import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from chat.models import KeptResponse
from groups.models import Group
from tests.clients import drivers
from tests.clients.conftest import Demo, demo_build
from tests.clients.recipes import cli_path, cli_run, recipe
from tests.clients.record import GLOB_TOOL_PROMPT
from tests.factories import text_model_make, upstream_make
from tests.gunicorn_server import gunicorn_serving

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = pytest.mark.django_db

DEMO_REPLY = "Demo reply"  # how the demo upstream's answers start (upstreams/providers/demo_text.py)


@dataclass
class Live:
    url: str  # the gateway's root
    demo: Demo


# The translated calls here land on the same gateway, a second call inside the first: pytest-django's
# test server (SQLite) runs every request thread on one shared SQLite connection, so the two would share
# a transaction. On PostgreSQL the gateway is gunicorn, each call on its own connection; on SQLite the
# translated pairs are tested against mocked providers (tests/chat/test_*_via_*.py).
needs_own_connections = pytest.mark.skipif(
    not ON_POSTGRES, reason="a call inside a call on pytest-django's test server shares its SQLite connection"
)

# Text models served through a translator, their upstream the gateway's own /v1 (where the demo's
# models answer), reached with the demo key: an `openai-compatible` one (chat completions, answered by
# demo-chat) and an `anthropic` one (messages, answered by demo-claude).
VIA_CHAT_MODEL = "demo-claude-via-chat"
VIA_MESSAGES_MODEL = "demo-gpt-via-messages"
SELF_KEY_ENV = "IGW_CLIENTS_SELF_KEY"


def via_chat_model_add(url: str) -> None:
    group = Group.objects.get(name="Demo-Chat")
    compatible = upstream_make(
        name="self-compatible", base_url=f"{url}/v1", api_key_env=SELF_KEY_ENV, kind="openai-compatible"
    )
    text_model_make(
        model_id=VIA_CHAT_MODEL,
        group=group,
        upstreams=[compatible],
        upstream_model="demo-chat",
        max_output_tokens=32000,
    )
    messages = upstream_make(
        name="self-anthropic", base_url=f"{url}/v1", api_key_env=SELF_KEY_ENV, kind="anthropic"
    )
    text_model_make(
        model_id=VIA_MESSAGES_MODEL,
        group=group,
        upstreams=[messages],
        upstream_model="demo-claude",
        max_output_tokens=32000,
    )


@pytest.fixture(scope="module")
def _gunicorn(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Live | None]:
    """PostgreSQL: the demo configuration committed and gunicorn serving it, for the whole module."""
    if not ON_POSTGRES:
        yield None
        return
    with django_db_blocker.unblock():
        cache.clear()
        try:
            folder = tmp_path_factory.mktemp("clients")
            demo = demo_build(folder / ".demo-keys")
            with gunicorn_serving(log_path=folder / "gunicorn.log", env={SELF_KEY_ENV: demo.key}) as url:
                via_chat_model_add(url)
                yield Live(url=url, demo=demo)
        finally:
            call_command("flush", verbosity=0, interactive=False, reset_sequences=False)
            cache.clear()


@pytest.fixture
def live(request, _gunicorn, tmp_path, monkeypatch) -> Live:
    if _gunicorn is not None:
        cache.clear()  # the demo group's 60 calls a minute count per test
        return _gunicorn
    server = request.getfixturevalue("live_server")  # flushes the tables after the test
    cache.clear()
    demo = demo_build(tmp_path / ".demo-keys")
    monkeypatch.setenv(SELF_KEY_ENV, demo.key)
    via_chat_model_add(server.url)
    return Live(url=server.url, demo=demo)


class Billing:
    """The usage records and charges made from the moment it is built."""

    def __init__(self, live: Live) -> None:
        self.account = live.demo.account
        last = UsageRecord.objects.order_by("-id").first()
        self.after_id = last.id if last else 0
        self.balance = Wallet.objects.get(account=self.account).balance

    def records(self, *, expected: int | None = None) -> list[UsageRecord]:
        """The new usage records; waits (2 s at most) for `expected` of them, since a server may write
        a streamed call's record as its answer ends."""
        deadline = time.monotonic() + 2
        while True:
            found = list(
                UsageRecord.objects.filter(id__gt=self.after_id, account=self.account).order_by("id")
            )
            if expected is None or len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def records_settled(self) -> list[UsageRecord]:
        """The new usage records once none has come for half a second and no call of the account holds
        money (5 s at most): a CLI may exit before the server has finished its last call (a streamed
        one, or one it does not wait for)."""
        deadline = time.monotonic() + 5
        found = self.records()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            again = self.records()
            in_flight = Hold.objects.filter(wallet__account=self.account, status=Hold.Status.OPEN).exists()
            if len(again) == len(found) and not in_flight:
                break
            found = again
        return found

    def assert_each_call_billed_once(
        self, *, calls: int, endpoints: set[str], model: str | None, free: int = 0
    ) -> list[UsageRecord]:
        """`calls` billed calls on `endpoints` of `model` (None: any), and `free` count_tokens calls
        recorded uncharged; returns all their records in order."""
        everything = self.records(expected=calls + free)
        assert len(everything) == calls + free, [(r.endpoint, r.status, r.error_code) for r in everything]
        counts = [r for r in everything if r.endpoint == "messages.count_tokens"]
        assert [(r.status, r.amount) for r in counts] == [(200, 0)] * free
        records = [r for r in everything if r.endpoint != "messages.count_tokens"]
        assert {r.endpoint for r in records} <= endpoints
        assert all(r.status == 200 and model in (None, r.model_id) and r.amount > 0 for r in records), [
            (r.endpoint, r.status, r.error_code, r.amount) for r in records
        ]
        charges = LedgerEntry.objects.filter(reference__in=[r.request_id for r in records])
        assert sorted((c.reference, c.kind, c.amount) for c in charges) == sorted(
            (r.request_id, LedgerEntry.Kind.CHARGE, -r.amount) for r in records
        )
        wallet = Wallet.objects.get(account=self.account)
        assert wallet.balance == self.balance - sum((r.amount for r in records), Decimal(0))
        assert wallet.held == 0
        assert ledger_check() == []
        return everything


def _installed(name: str, path: Path | None = None) -> None:
    """`name` (an agent CLI, or the package at `path`) as npm installs it: `make test` and .ci/run
    install tests/clients/node, and stop if they cannot; without npm, as the Makefile says, skipped."""
    if not (path or cli_path(name)).exists():
        pytest.skip(f"{name} is not installed: run `npm ci --prefix tests/clients/node`")


# --- agent CLIs, as docs/text.md says to run them ---------------------------------------------------


def test_claude_code_answers_through_the_gateway_and_each_call_is_billed_once(live, tmp_path):
    _installed("claude")
    billing = Billing(live)
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()

    done = cli_run(
        "Claude Code", base_url=live.url, key=live.demo.key, home=tmp_path / "home", cwd=tmp_path / "project"
    )

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert DEMO_REPLY in done.stdout
    records = billing.records_settled()
    assert records, "Claude Code made no call the gateway recorded"
    billing.assert_each_call_billed_once(calls=len(records), endpoints={"messages"}, model="demo-claude")


@needs_own_connections
def test_claude_code_works_on_a_chat_completions_model_through_the_translator(live, tmp_path):
    """Claude Code speaks only /v1/messages; the model's upstream only Chat Completions. Each of its
    calls is billed once on /v1/messages, and once more where the translated call lands (the demo's
    chat model behind the gateway's own /v1, with the same account's key)."""
    _installed("claude")
    billing = Billing(live)
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()

    done = cli_run(
        "Claude Code",
        base_url=live.url,
        key=live.demo.key,
        home=tmp_path / "home",
        cwd=tmp_path / "project",
        model=VIA_CHAT_MODEL,
    )

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert DEMO_REPLY in done.stdout
    records = billing.records_settled()
    messages = [r for r in records if r.endpoint == "messages"]
    assert messages and {r.model_id for r in messages} == {VIA_CHAT_MODEL}
    inner = [r for r in records if r.endpoint == "chat.completions"]
    assert [r.model_id for r in inner] == ["demo-chat"] * len(messages)
    # Each translated call is charged what its upstream reported: the inner call's tokens.
    by_tokens = sorted((r.input_tokens, r.output_tokens) for r in messages)
    assert by_tokens == sorted((r.input_tokens, r.output_tokens) for r in inner)
    billing.assert_each_call_billed_once(
        calls=len(records), endpoints={"messages", "chat.completions"}, model=None
    )


def test_codex_exec_answers_through_the_gateway_and_each_call_is_billed_once(live, tmp_path):
    _installed("codex")
    billing = Billing(live)
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()

    done = cli_run(
        "Codex CLI", base_url=live.url, key=live.demo.key, home=tmp_path / "home", cwd=tmp_path / "project"
    )

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert DEMO_REPLY in done.stdout
    records = billing.records_settled()
    assert records, "Codex made no call the gateway recorded"
    billing.assert_each_call_billed_once(calls=len(records), endpoints={"responses"}, model="demo-chat")


@needs_own_connections
@pytest.mark.parametrize(
    ("model", "inner_endpoint", "inner_model"),
    [(VIA_CHAT_MODEL, "chat.completions", "demo-chat"), (VIA_MESSAGES_MODEL, "messages", "demo-claude")],
    ids=["chat-completions-upstream", "anthropic-upstream"],
)
def test_codex_exec_works_on_a_model_of_another_family_through_the_translator(
    live, tmp_path, model, inner_endpoint, inner_model
):
    """Codex speaks only /v1/responses; the model's upstream speaks Chat Completions, or Anthropic's
    Messages (reached through Chat Completions as the hub). With the doc's recipe for such a model
    (web search off), each of its calls is billed once on /v1/responses, and once more where the
    translated call lands."""
    _installed("codex")
    billing = Billing(live)
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()

    done = cli_run(
        "Codex CLI on a model without the Responses API",
        base_url=live.url,
        key=live.demo.key,
        home=tmp_path / "home",
        cwd=tmp_path / "project",
        model=model,
    )

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert DEMO_REPLY in done.stdout
    records = billing.records_settled()
    outer = [r for r in records if r.endpoint == "responses"]
    assert outer and {r.model_id for r in outer} == {model}
    assert [r.model_id for r in records if r.endpoint == inner_endpoint] == [inner_model] * len(outer)
    billing.assert_each_call_billed_once(
        calls=len(records), endpoints={"responses", inner_endpoint}, model=None
    )


@pytest.mark.parametrize(
    ("title", "program"), [("Qwen Code", "qwen"), ("opencode", "opencode")], ids=["qwen-code", "opencode"]
)
@pytest.mark.parametrize(
    ("model", "inner_model"),
    [
        ("demo-chat", None),
        pytest.param(VIA_MESSAGES_MODEL, "demo-claude", marks=needs_own_connections),
    ],
    ids=["native", "anthropic-upstream"],
)
def test_a_chat_completions_agent_cli_runs_its_tool_loop_and_each_call_is_billed_once(
    live, tmp_path, title, program, model, inner_model
):
    """Qwen Code and opencode stream Chat Completions; asked to use their glob tool, the demo upstream
    calls it, the CLI runs it and sends the result back (Qwen Code as text parts), and the answer
    speaks to that result. On a model whose upstream speaks Anthropic's Messages, each call is billed
    once more where the translated call lands."""
    _installed(program)
    billing = Billing(live)
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.txt").write_text("a file for the glob tool to find\n")

    done = cli_run(
        title,
        base_url=live.url,
        key=live.demo.key,
        home=tmp_path / "home",
        cwd=tmp_path / "project",
        model=model,
        prompt=GLOB_TOOL_PROMPT,
    )

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "Demo reply after the tool result" in done.stdout
    records = billing.records_settled()
    outer = [r for r in records if r.endpoint == "chat.completions" and r.model_id == model]
    assert len(outer) >= 2, "the call answered by a tool call, then the one sending its result"
    if inner_model is None:
        billing.assert_each_call_billed_once(calls=len(records), endpoints={"chat.completions"}, model=model)
    else:
        assert [r.model_id for r in records if r.endpoint == "messages"] == [inner_model] * len(outer)
        billing.assert_each_call_billed_once(
            calls=len(records), endpoints={"chat.completions", "messages"}, model=None
        )


def test_the_recipes_are_read_from_the_doc():
    """The recipes the CLIs run are the doc's, with the live address and key in its placeholders."""
    claude = recipe("Claude Code", base_url="http://gw.test", key="sk-live")
    codex = recipe("Codex CLI", base_url="http://gw.test", key="sk-live")
    openai_style = recipe("OpenAI-style clients", base_url="http://gw.test", key="sk-live")
    qwen = recipe("Qwen Code", base_url="http://gw.test", key="sk-live")
    opencode = recipe("opencode", base_url="http://gw.test", key="sk-live")

    assert claude.env["ANTHROPIC_BASE_URL"] == "http://gw.test"
    assert claude.env["ANTHROPIC_API_KEY"] == "sk-live"
    assert {"DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"} <= set(
        claude.env
    )
    assert claude.env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "demo-claude"
    assert claude.argv[0] == "claude" and claude.argv[-2:] == ["--model", "demo-claude"]
    assert 'base_url = "http://gw.test/v1"' in codex.files[".codex/config.toml"]
    assert 'wire_api = "responses"' in codex.files[".codex/config.toml"]
    assert codex.env == {"GATEWAY_API_KEY": "sk-live"}
    assert codex.argv[:2] == ["codex", "exec"]
    assert openai_style.env["OPENAI_BASE_URL"] == "http://gw.test/v1"
    assert openai_style.env["ANTHROPIC_BASE_URL"] == "http://gw.test"
    assert qwen.env == {"OPENAI_BASE_URL": "http://gw.test/v1", "OPENAI_API_KEY": "sk-live"}
    assert qwen.argv[0] == "qwen" and qwen.argv[-2:] == ["--model", "demo-chat"]
    assert json.loads(qwen.files[".qwen/settings.json"]) == {
        "security": {"auth": {"selectedType": "openai"}},
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    opencode_config = json.loads(opencode.files[".config/opencode/opencode.json"])
    assert opencode_config["provider"]["gateway"]["options"]["baseURL"] == "http://gw.test/v1"
    assert opencode.env["GATEWAY_API_KEY"] == "sk-live" and opencode.argv[:2] == ["opencode", "run"]


def test_the_sdks_reach_the_gateway_with_the_doc_s_environment_alone(live, monkeypatch):
    """The "OpenAI-style clients" recipe: its variables set, every client built without arguments."""
    import anthropic
    import openai
    from agents import Agent, Runner, set_tracing_disabled
    from langchain_anthropic import ChatAnthropic
    from langchain_openai import ChatOpenAI

    for name in ("OPENAI_API_BASE", "ANTHROPIC_API_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_ORG_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in recipe("OpenAI-style clients", base_url=live.url, key=live.demo.key).env.items():
        monkeypatch.setenv(name, value)
    set_tracing_disabled(True)
    billing = Billing(live)
    hello = [{"role": "user", "content": "Hello"}]

    answers = [
        openai.OpenAI().chat.completions.create(model="demo-chat", messages=hello).choices[0].message.content,
        anthropic.Anthropic()
        .messages.create(model="demo-claude", max_tokens=100, messages=hello)
        .content[0]
        .text,
        ChatOpenAI(model="demo-chat").invoke("Hello").text,
        ChatAnthropic(model="demo-claude").invoke("Hello").text,
        Runner.run_sync(Agent(name="Greeter", model="demo-chat"), "Hello").final_output,
    ]

    assert all(answer.startswith(DEMO_REPLY) for answer in answers), answers
    records = billing.assert_each_call_billed_once(
        calls=5, endpoints={"chat.completions", "messages", "responses"}, model=None
    )
    assert [(r.endpoint, r.model_id) for r in records] == [
        ("chat.completions", "demo-chat"),
        ("messages", "demo-claude"),
        ("chat.completions", "demo-chat"),
        ("messages", "demo-claude"),
        ("responses", "demo-chat"),
    ]


# --- Python clients: a tool loop each ---------------------------------------------------------------


def _check_loop(result: drivers.LoopResult) -> None:
    assert result.tool_calls >= 1, "the model never called the tool"
    assert result.calls == result.tool_calls + 1
    assert result.answer.startswith(DEMO_REPLY), result.answer


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(False, id="json"),
        # A streamed call still settling in its server thread when the SDK's next call starts would
        # share pytest-django's one SQLite connection with it (make run's SQLite: test_make_run_clients).
        pytest.param(True, id="stream", marks=needs_own_connections),
    ],
)
def test_openai_sdk_chat_completions_tool_loop_is_billed_per_call(live, stream):
    billing = Billing(live)

    result = drivers.openai_chat_tool_loop(f"{live.url}/v1", live.demo.key, "demo-chat", stream=stream)

    _check_loop(result)
    billing.assert_each_call_billed_once(
        calls=result.calls, endpoints={"chat.completions"}, model="demo-chat"
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_sdk_responses_tool_loop_is_billed_per_call(live, stream):
    billing = Billing(live)

    result = drivers.openai_responses_tool_loop(f"{live.url}/v1", live.demo.key, "demo-chat", stream=stream)

    _check_loop(result)
    billing.assert_each_call_billed_once(calls=result.calls, endpoints={"responses"}, model="demo-chat")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic_sdk_tool_loop_is_billed_per_call_and_count_tokens_is_free(live, stream):
    billing = Billing(live)

    result = drivers.anthropic_tool_loop(live.url, live.demo.key, "demo-claude", stream=stream)
    counted = drivers.anthropic_count_tokens(live.url, live.demo.key, "demo-claude")

    _check_loop(result)
    assert counted > 0
    records = billing.assert_each_call_billed_once(
        calls=result.calls, endpoints={"messages"}, model="demo-claude", free=1
    )
    assert [r.endpoint for r in records] == ["messages"] * result.calls + ["messages.count_tokens"]


@needs_own_connections
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_sdk_chat_tool_loop_on_an_anthropic_model_through_the_translator(live, stream):
    """The openai SDK on /v1/chat/completions; the model's upstream speaks only Messages. Each call is
    billed once as a chat completion, and once more where the translated call lands (demo-claude on
    /v1/messages), at the same tokens."""
    billing = Billing(live)

    result = drivers.openai_chat_tool_loop(f"{live.url}/v1", live.demo.key, VIA_MESSAGES_MODEL, stream=stream)

    _check_loop(result)
    records = billing.assert_each_call_billed_once(
        calls=2 * result.calls, endpoints={"chat.completions", "messages"}, model=None
    )
    outer = [r for r in records if r.endpoint == "chat.completions"]
    inner = [r for r in records if r.endpoint == "messages"]
    assert {r.model_id for r in outer} == {VIA_MESSAGES_MODEL} and {r.model_id for r in inner} == {
        "demo-claude"
    }
    tokens = sorted((r.input_tokens, r.cached_tokens, r.cache_write_tokens, r.output_tokens) for r in outer)
    assert tokens == sorted(
        (r.input_tokens, r.cached_tokens, r.cache_write_tokens, r.output_tokens) for r in inner
    )


@needs_own_connections
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_sdk_responses_tool_loop_on_a_chat_completions_model_through_the_translator(live, stream):
    """The openai SDK on /v1/responses; the model's upstream speaks only Chat Completions."""
    billing = Billing(live)

    result = drivers.openai_responses_tool_loop(
        f"{live.url}/v1", live.demo.key, VIA_CHAT_MODEL, stream=stream
    )

    _check_loop(result)
    records = billing.assert_each_call_billed_once(
        calls=2 * result.calls, endpoints={"responses", "chat.completions"}, model=None
    )
    assert [r.model_id for r in records if r.endpoint == "responses"] == [VIA_CHAT_MODEL] * result.calls


@needs_own_connections
def test_openai_agents_sdk_runs_on_a_chat_completions_model_through_the_translator(live):
    billing = Billing(live)

    result = drivers.agents_tool_loop(f"{live.url}/v1", live.demo.key, VIA_CHAT_MODEL)

    _check_loop(result)
    billing.assert_each_call_billed_once(
        calls=2 * result.calls, endpoints={"responses", "chat.completions"}, model=None
    )


@needs_own_connections
def test_langchain_openai_tool_loop_on_an_anthropic_model_through_the_translator(live):
    billing = Billing(live)

    result = drivers.langchain_openai_tool_loop(f"{live.url}/v1", live.demo.key, VIA_MESSAGES_MODEL)

    _check_loop(result)
    billing.assert_each_call_billed_once(
        calls=2 * result.calls, endpoints={"chat.completions", "messages"}, model=None
    )


def test_langchain_openai_tool_loop_on_chat_completions_and_responses(live):
    billing = Billing(live)

    chat = drivers.langchain_openai_tool_loop(f"{live.url}/v1", live.demo.key, "demo-chat")
    responses = drivers.langchain_openai_tool_loop(
        f"{live.url}/v1", live.demo.key, "demo-chat", responses_api=True
    )

    _check_loop(chat)
    _check_loop(responses)
    records = billing.assert_each_call_billed_once(
        calls=chat.calls + responses.calls, endpoints={"chat.completions", "responses"}, model="demo-chat"
    )
    assert [r.endpoint for r in records] == ["chat.completions"] * chat.calls + [
        "responses"
    ] * responses.calls


def test_langchain_anthropic_tool_loop_is_billed_per_call(live):
    billing = Billing(live)

    result = drivers.langchain_anthropic_tool_loop(live.url, live.demo.key, "demo-claude")

    _check_loop(result)
    billing.assert_each_call_billed_once(calls=result.calls, endpoints={"messages"}, model="demo-claude")


@pytest.mark.parametrize("chat_completions", [False, True], ids=["responses", "chat"])
def test_openai_agents_sdk_runs_its_tool_and_is_billed_per_call(live, chat_completions):
    billing = Billing(live)

    result = drivers.agents_tool_loop(
        f"{live.url}/v1", live.demo.key, "demo-chat", chat_completions=chat_completions
    )

    _check_loop(result)
    endpoint = "chat.completions" if chat_completions else "responses"
    billing.assert_each_call_billed_once(calls=result.calls, endpoints={endpoint}, model="demo-chat")


def _assert_responses_billed(billing: Billing, *, model: str, calls: int) -> None:
    """`calls` /v1/responses calls of `model` billed once each, and a translated model's once more
    where each landed (the demo's chat completions)."""
    translated = model == VIA_CHAT_MODEL
    records = billing.assert_each_call_billed_once(
        calls=calls * (2 if translated else 1),
        endpoints={"responses", "chat.completions"} if translated else {"responses"},
        model=None,
    )
    assert [r.model_id for r in records if r.endpoint == "responses"] == [model] * calls


def _assert_one_chain(live: Live, *, responses: int) -> None:
    """The gateway kept `responses` answers as one conversation, each continuing the one before."""
    kept = list(KeptResponse.objects.filter(account=live.demo.account).order_by("created_at", "id"))
    assert [k.depth for k in kept] == list(range(responses))
    assert [k.previous_response_id for k in kept[1:]] == [k.response_id for k in kept[:-1]]
    assert {k.root_id for k in kept} == {k.response_id for k in kept[:1]}


CHAINED_MODELS = [
    pytest.param("demo-chat", id="native"),
    pytest.param(VIA_CHAT_MODEL, id="translated", marks=needs_own_connections),
]


@pytest.mark.parametrize("model", CHAINED_MODELS)
def test_openai_agents_sdk_chains_its_calls_by_previous_response_id(live, model):
    """`auto_previous_response_id`, then a second run continuing the first: each call sends only what
    is new. A translated model's upstream keeps nothing; the gateway sends the conversation it kept
    (chat/response_store.py)."""
    KeptResponse.objects.filter(account=live.demo.account).delete()
    billing = Billing(live)

    result = drivers.agents_tool_loop(
        f"{live.url}/v1", live.demo.key, model, follow_up="Thanks. And tomorrow?"
    )

    assert result.tool_calls >= 1 and result.calls == result.tool_calls + 2
    assert result.answer.startswith(DEMO_REPLY), result.answer
    _assert_responses_billed(billing, model=model, calls=result.calls)
    _assert_one_chain(live, responses=result.calls if model == VIA_CHAT_MODEL else 0)


@pytest.mark.parametrize("model", CHAINED_MODELS)
def test_langchain_openai_chains_its_calls_by_previous_response_id(live, model):
    KeptResponse.objects.filter(account=live.demo.account).delete()
    billing = Billing(live)

    result = drivers.langchain_openai_tool_loop(
        f"{live.url}/v1", live.demo.key, model, responses_api=True, previous_response_id=True
    )

    _check_loop(result)
    _assert_responses_billed(billing, model=model, calls=result.calls)
    _assert_one_chain(live, responses=result.calls if model == VIA_CHAT_MODEL else 0)


@needs_own_connections
def test_openai_sdk_retrieves_and_deletes_a_response_the_gateway_kept(live):
    """`responses.retrieve` and `responses.delete` of an answer of a translated model."""
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key=live.demo.key, max_retries=0, timeout=60)
    created = client.responses.create(model=VIA_CHAT_MODEL, input="Hi.", max_output_tokens=256)

    retrieved = client.responses.retrieve(created.id)
    client.responses.delete(created.id)

    assert retrieved.model_dump() == created.model_dump()
    assert retrieved.output_text.startswith(DEMO_REPLY)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    assert not KeptResponse.objects.filter(response_id=created.id).exists()


# --- the Vercel AI SDK (Node), multi-step with one tool -----------------------------------------------

AI_SDK_MODELS = {"responses": "demo-chat", "chat": "demo-chat", "messages": "demo-claude"}
AI_SDK_ENDPOINTS = {"responses": "responses", "chat": "chat.completions", "messages": "messages"}
AI_SDK_PACKAGE = drivers.AI_SDK_LOOP.with_name("node_modules") / "ai"


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(False, id="json"),
        pytest.param(True, id="stream", marks=needs_own_connections),  # as the openai SDK's stream
    ],
)
@pytest.mark.parametrize("api", ["responses", "chat", "messages"])
def test_ai_sdk_tool_loop_is_billed_per_call(live, api, stream):
    _installed("the AI SDK", AI_SDK_PACKAGE)
    billing = Billing(live)

    result = drivers.ai_sdk_tool_loop(
        f"{live.url}/v1", live.demo.key, AI_SDK_MODELS[api], api=api, stream=stream
    )

    _check_loop(result)
    billing.assert_each_call_billed_once(
        calls=result.calls, endpoints={AI_SDK_ENDPOINTS[api]}, model=AI_SDK_MODELS[api]
    )


@needs_own_connections
@pytest.mark.parametrize(
    ("api", "model", "inner"),
    [
        ("responses", VIA_CHAT_MODEL, "chat.completions"),
        ("messages", VIA_CHAT_MODEL, "chat.completions"),
        ("chat", VIA_MESSAGES_MODEL, "messages"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_ai_sdk_tool_loop_on_a_model_of_another_family_through_the_translator(
    live, api, model, inner, stream
):
    """Each call is billed once where the AI SDK sent it, and once more where the translated call
    lands (the demo's model of the other family behind the gateway's own /v1). The output limit is
    set: left to the SDK, a model id with `claude-` in it is asked for 128,000 tokens, which the
    translated models (32,000, as the demo models they call allow) refuse."""
    _installed("the AI SDK", AI_SDK_PACKAGE)
    billing = Billing(live)

    result = drivers.ai_sdk_tool_loop(
        f"{live.url}/v1", live.demo.key, model, api=api, stream=stream, max_output_tokens=1024
    )

    _check_loop(result)
    records = billing.assert_each_call_billed_once(
        calls=2 * result.calls, endpoints={AI_SDK_ENDPOINTS[api], inner}, model=None
    )
    assert [r.model_id for r in records if r.endpoint == AI_SDK_ENDPOINTS[api]] == [model] * result.calls


@pytest.mark.parametrize(
    "model",
    [
        pytest.param("demo-chat", id="native"),
        pytest.param(VIA_CHAT_MODEL, id="translated", marks=needs_own_connections),
    ],
)
def test_ai_sdk_conversation_goes_on_after_its_tool_loop_on_the_responses_api(live, model):
    """The second turn names the first turn's items by reference (`item_reference`, the SDK's
    default): a translated model's upstream keeps nothing, so the gateway puts back the items it
    kept of its own answers (chat/response_store.py)."""
    _installed("the AI SDK", AI_SDK_PACKAGE)
    billing = Billing(live)

    result = drivers.ai_sdk_tool_loop(
        f"{live.url}/v1",
        live.demo.key,
        model,
        api="responses",
        stream=False,
        max_output_tokens=1024,
        follow_up="Thanks. And tomorrow?",
    )

    assert result.tool_calls >= 1 and result.calls == result.tool_calls + 2
    assert result.answer.startswith(DEMO_REPLY), result.answer
    _assert_responses_billed(billing, model=model, calls=result.calls)
