"""An upstream whose provider key variable is unset: answered at once (502 upstream_misconfigured),
never retried or waited for, another upstream of the model tried at once, and a warning from
`manage.py check --database default` (once, not with every other command)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core import checks
from django.core.cache import cache
from django.core.management import call_command

from api.upstream_errors import upstream_error_to_api_error
from core.errors import UpstreamFailed
from tests.factories import upstream_make
from upstreams.circuit import circuit_state, circuit_stats_flush
from upstreams.providers import adapter_for
from upstreams.providers.base import ImageRequest, TextRequest
from upstreams.resilience import upstream_call_resilient

pytestmark = pytest.mark.django_db

UNSET_ENV = "IGW_TEST_UNSET_PROVIDER_KEY"
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"
KINDS = {
    "openai": "https://api.openai.test/v1",
    "gemini": "https://gemini.test/v1beta",
    "anthropic": "https://api.anthropic.test/v1",
}


@pytest.fixture(autouse=True)
def clean_cache():
    circuit_stats_flush()
    cache.clear()
    yield
    circuit_stats_flush()
    cache.clear()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def attempt_of(calls: list[str]):
    def attempt(upstream, deadline):
        calls.append(upstream.name)
        adapter = adapter_for(upstream, deadline=deadline)
        if upstream.kind == "anthropic":
            return adapter.call("messages", TextRequest(operation="messages", body=b"{}", stream=False))
        return adapter.image_call(ImageRequest(operation="generate", upstream_model="m", prompt="p"))

    return attempt


def call(upstreams, calls, clock):
    return upstream_call_resilient(
        upstreams=upstreams,
        attempt=attempt_of(calls),
        classify=lambda error, failed: upstream_error_to_api_error(error=error, upstream=failed),
        clock=clock,
        sleep=clock.sleep,
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_unset_key_is_answered_at_once_as_misconfigured(kind, monkeypatch, mocked):
    monkeypatch.delenv(UNSET_ENV, raising=False)
    upstream = upstream_make(name=f"{kind}-nokey", kind=kind, base_url=KINDS[kind], api_key_env=UNSET_ENV)
    clock, calls = Clock(), []
    with pytest.raises(UpstreamFailed) as info:
        call([upstream], calls, clock)
    assert (info.value.status, info.value.code) == (502, "upstream_misconfigured")
    assert calls == [upstream.name]
    assert clock.sleeps == []
    assert len(mocked.calls) == 0
    assert circuit_state(upstream_id=upstream.pk).consecutive_failures == 0


def test_another_upstream_of_the_model_is_tried_at_once(monkeypatch, mocked, demo_upstream):
    monkeypatch.delenv(UNSET_ENV, raising=False)
    broken = upstream_make(name="nokey", base_url=KINDS["openai"], api_key_env=UNSET_ENV)
    clock, calls = Clock(), []
    result, used = call([broken, demo_upstream], calls, clock)
    assert used.name == "demo" and result.items
    assert calls == ["nokey", "demo"]
    assert clock.sleeps == []


def test_check_warns_of_each_enabled_upstream_whose_key_variable_is_missing(monkeypatch, demo_upstream):
    monkeypatch.delenv(UNSET_ENV, raising=False)
    monkeypatch.setenv("IGW_TEST_SET_PROVIDER_KEY", "sk-set")
    upstream_make(name="nokey", base_url=KINDS["openai"], api_key_env=UNSET_ENV)
    upstream_make(name="nokey-gemini", kind="gemini", base_url=KINDS["gemini"], api_key_env="")
    upstream_make(name="haskey", base_url=KINDS["openai"], api_key_env="IGW_TEST_SET_PROVIDER_KEY")
    disabled = upstream_make(name="off", base_url=KINDS["openai"], api_key_env=UNSET_ENV)
    disabled.enabled = False
    disabled.save(update_fields=["enabled"])

    warnings = [issue for issue in checks.run_checks(databases=["default"]) if issue.id == "upstreams.W001"]

    assert sorted(w.obj for w in warnings) == ["nokey", "nokey-gemini"]
    assert all(w.level == checks.WARNING for w in warnings)
    assert UNSET_ENV in next(w.msg for w in warnings if w.obj == "nokey")


def _command_output(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    # As from the command line: call_command skips a command's system checks unless told not to
    # (`check` itself has no such option).
    options = {} if args[0] == "check" else {"skip_checks": False}
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue() + err.getvalue()


def test_the_key_warning_prints_once_for_check_and_not_with_every_other_command(monkeypatch, tmp_path):
    # The examples' three upstreams, none of their key variables set, as on a fresh machine.
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    loaded = [_command_output("loadconfig", str(path)) for path in sorted(EXAMPLES.glob("*.toml"))]
    assert all("W001" not in output for output in loaded), loaded  # commands other than check: silent
    assert "W001" not in _command_output("createaccount", "newcomer", "--groups", "OpenAI-Text")

    report = _command_output("check", "--database", "default")

    lines = [line for line in report.splitlines() if "upstreams.W001" in line]
    once_each = ["anthropic", "deepseek", "gemini", "openai"]
    assert sorted(line.split(":")[0] for line in lines) == once_each
    assert "OPENAI_API_KEY is unset or empty" in report
    # Plain `check` runs no database check, as Django's own database checks (docs/providers.md).
    assert "W001" not in _command_output("check")


def test_make_runs_steps_print_each_key_warning_once(monkeypatch, tmp_path):
    """`make run` runs migrate, loadconfig and demo_keys: with the examples loaded and no key set,
    each warning comes once (from migrate), not once per step."""
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    for path in sorted(EXAMPLES.glob("*.toml")):
        _command_output("loadconfig", str(path))

    printed = "".join(
        (
            _command_output("migrate", "--noinput", "-v", "0"),
            _command_output("loadconfig", str(EXAMPLES.parent / "demo.toml")),
            _command_output("demo_keys", str(tmp_path / ".demo-keys")),
        )
    )

    lines = [line for line in printed.splitlines() if "upstreams.W001" in line]
    assert sorted(line.split(":")[0] for line in lines) == ["anthropic", "deepseek", "gemini", "openai"]
