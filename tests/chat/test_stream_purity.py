"""The code the stream loop runs for every event is pure: no logging, no locks, no I/O.

api/stream_loop.py serves every open stream of a worker between two greenlets, and for each event it
runs the upstream body's SSE parsing (upstreams/sse.py), the family's stream tracker
(chat/families.py) and a translated stream's translator (translators/). Anything there that waits (a
lock, a write to a log handler, a read of a file or a socket) would stall every stream of the worker
at once, and a greenlet switch inside it would run other greenlets in the middle of the loop's pass
(docs/architecture.md, "The complexity budget").

Two checks: the modules' own source imports nothing that does I/O or takes locks and calls no
logging, and running each family's tracker over a whole stream, as the relay does (noting the output
received, too), raises no audit event of I/O (files, sockets, processes, sleeps).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from chat.families import ChatCompletionsTracker, MessagesTracker, ResponsesTracker, StreamTracker
from tests.chat.test_stream_skim import chat_events, messages_events, responses_events
from upstreams.sse import SSEEvent, SSEParser

# The modules whose code runs inside the stream loop for each event.
PURE_MODULES = (
    "translators.values",
    "chat.families",
    "chat.output_count",
    "upstreams.sse",
    "translators",
    "translators.messages_via_chat",
    "translators.chat_via_messages",
    "translators.responses_via_chat",
    "translators.chained",
    "translators.chat_via_gemini",
)

# Modules (and their submodules) that do I/O, wait or lock.
IMPURE_IMPORTS = frozenset({
    "asyncio", "django.db", "gevent", "greenlet", "http", "io", "logging", "multiprocessing", "os",
    "psycopg", "queue", "redis", "requests", "select", "selectors", "socket", "ssl", "subprocess",
    "threading", "time", "urllib", "urllib3",
})  # fmt: skip
IMPURE_CALLS = frozenset({"open", "print", "input", "breakpoint", "getLogger", "sleep"})

# Audit events (sys.addaudithook) of I/O and waits.
IMPURE_AUDIT_PREFIXES = ("open", "socket.", "subprocess.", "os.", "time.sleep", "shutil.", "sqlite3.")


def _imported(tree: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, node.lineno


def _impure(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in IMPURE_IMPORTS)


@pytest.mark.parametrize("name", PURE_MODULES)
def test_the_stream_loops_per_event_modules_import_nothing_that_does_io_or_locks(name):
    tree = ast.parse(inspect.getsource(importlib.import_module(name)))

    impure = [f"{module} (line {line})" for module, line in _imported(tree) if _impure(module)]

    assert impure == [], f"{name} imports {impure}: the stream loop's code must stay pure"


@pytest.mark.parametrize("name", PURE_MODULES)
def test_the_stream_loops_per_event_modules_call_no_logging_and_no_io(name):
    tree = ast.parse(inspect.getsource(importlib.import_module(name)))
    called = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called_name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called_name in IMPURE_CALLS or (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in {"logger", "log", "logging"}
            ):
                called.append(f"{ast.unparse(func)} (line {node.lineno})")

    assert called == [], f"{name} calls {called}: the stream loop's code must stay pure"


def test_the_check_finds_an_impure_import_and_call():
    source = "import logging\nfrom time import sleep\nlogger = logging.getLogger(__name__)\nsleep(1)\n"
    tree = ast.parse(source)

    assert [module for module, _ in _imported(tree) if _impure(module)] == ["logging", "time"]
    assert sorted(
        node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    ) == ["getLogger", "sleep"]


_watching: list[str] | None = None


def _audit(event: str, _args: tuple) -> None:
    if _watching is not None and event.startswith(IMPURE_AUDIT_PREFIXES):
        _watching.append(event)


@contextmanager
def _io_audited() -> Iterator[list[str]]:
    """The audit events of I/O raised inside the block (a hook cannot be removed: it is installed once
    and records only while a block runs)."""
    global _watching
    if _audit not in _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED.append(_audit)
    _watching = []
    try:
        yield _watching
    finally:
        _watching = None


_HOOKED: list = []


def _wire(events: list[SSEEvent]) -> bytes:
    return b"".join(event.raw for event in events)


@pytest.mark.parametrize(
    ("tracker_class", "events"),
    [
        (ChatCompletionsTracker, chat_events()),
        (ResponsesTracker, responses_events()),
        (MessagesTracker, messages_events()),
    ],
    ids=["chat", "responses", "messages"],
)
def test_a_whole_stream_parsed_and_tracked_does_no_io(tracker_class: type[StreamTracker], events):
    body = _wire(events)
    tracker = tracker_class(usage_asked=True)
    parser = SSEParser(skim=tracker.skim)

    def relay(events: list[SSEEvent]) -> list[SSEEvent]:  # as chat/streaming.py's relay does
        relayed = []
        for event in events:
            tracker.received.take(event.raw)  # the output received, for a caller who leaves
            if event.skimmed or tracker.feed(event):
                relayed.append(event)
        return relayed

    with _io_audited() as raised:
        relayed = []
        for start in range(0, len(body), 37):  # pieces as reads of the connection bring them
            relayed += relay(parser.feed(body[start : start + 37]))
        relayed += relay(parser.end())
        tracker.ended()

    assert raised == []
    assert tracker.complete and tracker.error is None and tracker.tokens is not None
    assert tracker.received.text() != ""
    assert b"".join(event.raw for event in relayed) == body


def test_the_audit_check_sees_io():
    with _io_audited() as raised, open(__file__, "rb"):
        pass

    assert "open" in raised
