"""The agent CLIs against what `make run` serves: gunicorn (its gthread worker) on a SQLite file without
Redis, set up by the commands scripts/run_demo.py runs (migrate, loadconfig config/demo.toml,
demo_keys), whatever database the rest of the suite runs on.

Each call a client makes is billed once: the gateway's own file holds one usage record with status
200 and one ledger charge of its amount per call, and `GET /v1/me` shows the balance down by their
sum. The CLIs are skipped only when they are not installed (`npm ci --prefix tests/clients/node`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
import requests

from billing.models import LedgerEntry, UsageRecord
from tests.clients import drivers
from tests.clients.recipes import ROOT, cli_path, cli_run
from tests.gunicorn_server import gunicorn_serving

DEMO_REPLY = "Demo reply"


@dataclass
class MakeRun:
    url: str
    key: str  # the demo text key demo_keys printed
    database: Path

    def me(self) -> dict:
        answer = requests.get(
            f"{self.url}/v1/me", headers={"authorization": f"Bearer {self.key}"}, timeout=10
        )
        answer.raise_for_status()
        return answer.json()

    def rows(self, model, *fields: str, after: int = 0) -> list[tuple]:
        """Rows of one of the gateway's tables in its own file, read-only, by the model's column names."""
        columns = ", ".join(model._meta.get_field(f).column for f in fields)
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True) as db:
            return db.execute(
                f"SELECT {columns} FROM {model._meta.db_table} WHERE id > ? ORDER BY id",  # noqa: S608 - names from the models
                (after,),
            ).fetchall()

    def last_record_id(self) -> int:
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True) as db:
            return db.execute(f"SELECT COALESCE(MAX(id), 0) FROM {UsageRecord._meta.db_table}").fetchone()[0]  # noqa: S608


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def make_run(tmp_path_factory) -> Iterator[MakeRun]:
    folder = tmp_path_factory.mktemp("make-run")
    database = folder / "db.sqlite3"
    settings = {"DATABASE_URL": f"sqlite:///{database}", "REDIS_URL": ""}
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test", **settings}
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "loadconfig", str(ROOT / "config" / "demo.toml"))
    keys = json.loads(_manage(env, "demo_keys", str(folder / ".demo-keys")))["keys"]
    with gunicorn_serving(log_path=folder / "gunicorn.log", env=settings) as url:
        yield MakeRun(url=url, key=keys["Demo-Chat"], database=database)


def _settled_records(make_run: MakeRun, *, after: int) -> list[tuple]:
    """The new usage records once none has come for half a second (5 s at most): a CLI may exit
    before the server has written the record of its last streamed call."""
    deadline = time.monotonic() + 5
    found = make_run.rows(UsageRecord, "request_id", "endpoint", "status", "amount", after=after)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        again = make_run.rows(UsageRecord, "request_id", "endpoint", "status", "amount", after=after)
        if len(again) == len(found):
            break
        found = again
    return found


def _assert_each_call_billed_once(make_run: MakeRun, *, after: int, before: dict, endpoint: str, calls=None):
    records = _settled_records(make_run, after=after)
    assert records, "no call was recorded"
    if calls is not None:
        assert len(records) == calls
    assert {(e, s) for _, e, s, _ in records} == {(endpoint, 200)}, records
    amounts = {request_id: Decimal(str(amount)) for request_id, _, _, amount in records}
    assert all(amount > 0 for amount in amounts.values())
    charges = [
        (reference, kind, Decimal(str(amount)))
        for reference, kind, amount in make_run.rows(LedgerEntry, "reference", "kind", "amount")
        if reference in amounts
    ]
    assert sorted(charges) == sorted((r, LedgerEntry.Kind.CHARGE, -a) for r, a in amounts.items())
    me = make_run.me()
    assert Decimal(me["balance"]) == Decimal(before["balance"]) - sum(amounts.values())
    assert Decimal(me["balance_held"]) == 0
    assert me["usage"]["today"]["calls"] == before["usage"]["today"]["calls"] + len(records)


@pytest.mark.parametrize(
    ("title", "program", "endpoint"),
    [
        ("Claude Code", "claude", "messages"),
        ("Codex CLI", "codex", "responses"),
        ("Qwen Code", "qwen", "chat.completions"),
        ("opencode", "opencode", "chat.completions"),
    ],
    ids=["claude-code", "codex", "qwen-code", "opencode"],
)
def test_an_agent_cli_works_against_make_run_and_each_call_is_billed_once(
    make_run, tmp_path, title, program, endpoint
):
    if not cli_path(program).exists():
        pytest.skip(f"{program} is not installed: run `npm ci --prefix tests/clients/node`")
    after, before = make_run.last_record_id(), make_run.me()
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()

    done = cli_run(
        title, base_url=make_run.url, key=make_run.key, home=tmp_path / "home", cwd=tmp_path / "project"
    )

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert DEMO_REPLY in done.stdout
    _assert_each_call_billed_once(make_run, after=after, before=before, endpoint=endpoint)


def test_a_streamed_sdk_tool_loop_against_make_run_is_billed_per_call(make_run):
    after, before = make_run.last_record_id(), make_run.me()

    result = drivers.openai_chat_tool_loop(f"{make_run.url}/v1", make_run.key, "demo-chat", stream=True)

    assert result.tool_calls >= 1 and result.answer.startswith(DEMO_REPLY)
    _assert_each_call_billed_once(
        make_run, after=after, before=before, endpoint="chat.completions", calls=result.calls
    )
