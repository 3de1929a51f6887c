"""Fixtures of the upstream adapter tests: an OpenAI-compatible and an Anthropic upstream reached only
through `responses` (or a raw socket for a broken transfer), each with its key in the environment,
and the text requests the endpoint app hands the adapters."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import responses as responses_lib

from tests.factories import upstream_make
from tests.images.conftest import RawUpstream
from upstreams.providers.base import TextRequest

OPENAI_BASE = "https://api.provider.test/v1"
OPENAI_KEY_ENV = "IGW_TEST_OPENAI_KEY"
OPENAI_KEY = "sk-test-openai-secret-0123456789abcdef"
ANTHROPIC_BASE = "https://api.anthropic.test/v1"
ANTHROPIC_KEY_ENV = "IGW_TEST_ANTHROPIC_KEY"
ANTHROPIC_KEY = "sk-ant-test-secret-0123456789abcdef"


@pytest.fixture
def mocked():
    """The HTTP boundary to upstreams: every request must match a registered answer."""
    with responses_lib.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


@pytest.fixture
def openai_upstream(db, monkeypatch):
    monkeypatch.setenv(OPENAI_KEY_ENV, OPENAI_KEY)
    return upstream_make(name="openai-text", base_url=OPENAI_BASE, api_key_env=OPENAI_KEY_ENV)


@pytest.fixture
def anthropic_upstream(db, monkeypatch):
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    return upstream_make(
        name="anthropic", kind="anthropic", base_url=ANTHROPIC_BASE, api_key_env=ANTHROPIC_KEY_ENV
    )


@pytest.fixture
def raw_upstream(db, monkeypatch):
    """`raw_upstream(answer, kind=..., rest=..., rest_after=...)` → an Upstream row served by a
    RawUpstream (fixed bytes; `rest` sent `rest_after` seconds after `answer`)."""
    monkeypatch.setenv(OPENAI_KEY_ENV, OPENAI_KEY)
    servers: list[RawUpstream] = []

    def start(answer: bytes, *, kind: str = "openai", rest: bytes = b"", rest_after: float = 0.0) -> Any:
        server = RawUpstream(answer, rest=rest, rest_after=rest_after)
        servers.append(server)
        return upstream_make(
            name=f"raw-{len(servers)}", kind=kind, base_url=server.base_url, api_key_env=OPENAI_KEY_ENV
        )

    yield start
    for server in servers:
        server.close()


def text_request(operation: str, body: dict[str, Any], *, stream: bool = False, **kwargs: Any) -> TextRequest:
    """A request as the endpoint app makes it: the body encoded once, sent as it is."""
    return TextRequest(operation=operation, body=json.dumps(body).encode(), stream=stream, **kwargs)


class Trickle(io.RawIOBase):
    """A response body that arrives `step` bytes at a time."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step, self.position = data, step, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self.step, len(self.data) - self.position)
        buffer[:size] = self.data[self.position : self.position + size]
        self.position += size
        return size


def trickled(data: bytes, step: int) -> io.BufferedReader:
    return io.BufferedReader(Trickle(data, step), buffer_size=step)


class EventByEvent(io.RawIOBase):
    """An event stream's body that arrives one event per read, as a provider sends it, or `per_read`
    events per read, as they pile up on the connection of a reader that falls behind."""

    def __init__(self, data: bytes | str, per_read: int = 1) -> None:
        data = data.encode() if isinstance(data, str) else data
        events = [piece + b"\n\n" for piece in data.split(b"\n\n") if piece]
        self.pieces = [b"".join(events[i : i + per_read]) for i in range(0, len(events), per_read)]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self.pieces:
            return 0
        piece = self.pieces.pop(0)
        buffer[: len(piece)] = piece
        return len(piece)


def event_by_event(data: bytes | str, per_read: int = 1) -> io.BufferedReader:
    return io.BufferedReader(EventByEvent(data, per_read))


def sse(*events: tuple[str, Any]) -> bytes:
    """An event stream as providers send it: `event:` lines where named, JSON data (or [DONE])."""
    text = ""
    for name, data in events:
        if name:
            text += f"event: {name}\n"
        text += f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"
    return text.encode()
