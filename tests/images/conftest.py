"""Fixtures of the image pipeline tests: models with different capabilities, an OpenAI-compatible
upstream (reached only through `responses`), images made with Pillow in memory, and a DNS table."""

from __future__ import annotations

import io
import ipaddress
import socket
import socketserver
import threading
import time
from decimal import Decimal
from typing import Any

import pytest
import responses as responses_lib
from PIL import Image

from images.services import image_model_upsert
from tests.factories import upstream_make

OPENAI_BASE = "https://api.provider.test/v1"
OPENAI_KEY_ENV = "IGW_TEST_PROVIDER_KEY"
OPENAI_KEY = "sk-test-provider-secret-0123456789abcdef"


def image_bytes(
    fmt: str = "PNG", size: tuple[int, int] = (64, 48), mode: str = "RGB", colour=(200, 30, 30)
) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, colour if mode != "RGBA" else (*colour, 255)).save(buffer, fmt)
    return buffer.getvalue()


def mask_bytes(size: tuple[int, int] = (64, 48)) -> bytes:
    mask = Image.new("RGBA", size, (0, 0, 0, 255))
    mask.paste((0, 0, 0, 0), (0, 0, size[0] // 2, size[1] // 2))
    buffer = io.BytesIO()
    mask.save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    """Hosted images go to a per-test directory."""
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def plain_model(alpha_group, demo_upstream):
    """A model that supports nothing optional: no sizes, qualities, formats, edits or streaming."""
    model, _ = image_model_upsert(
        model_id="plain-image",
        group=alpha_group,
        price=Decimal("0.02"),
        upstreams=[demo_upstream],
        upstream_model="",
        sizes=[],
        qualities=[],
        styles=[],
        backgrounds=[],
        output_formats=[],
        output_compression=None,
        max_n=1,
        edits_supported=False,
        stream_supported=False,
        default_response_format="url",
        enabled=True,
    )
    return model


@pytest.fixture
def streaming_model(alpha_group, demo_upstream):
    model, _ = image_model_upsert(
        model_id="alpha-image-2.5-flare",
        group=alpha_group,
        price=Decimal("0.15"),
        upstreams=[demo_upstream],
        upstream_model="",
        sizes=["1024x1024"],
        qualities=[],
        styles=["vivid", "natural"],
        backgrounds=[],
        output_formats=["png"],
        output_compression=None,
        max_n=2,
        edits_supported=True,
        stream_supported=True,
        default_response_format="b64_json",
        enabled=True,
    )
    return model


@pytest.fixture
def provider_key(monkeypatch):
    monkeypatch.setenv(OPENAI_KEY_ENV, OPENAI_KEY)
    return OPENAI_KEY


@pytest.fixture
def openai_upstream(db, provider_key):
    upstream = upstream_make(
        name="provider",
        base_url=OPENAI_BASE,
        api_key_env=OPENAI_KEY_ENV,
        timeout_seconds=30,
    )
    return upstream


@pytest.fixture
def local_upstream(db, provider_key):
    """An OpenAI-compatible upstream on the loopback interface (e.g. a local relay)."""
    upstream = upstream_make(
        name="local-relay",
        base_url="http://127.0.0.1:9400/v1",
        api_key_env=OPENAI_KEY_ENV,
        timeout_seconds=30,
    )
    return upstream


@pytest.fixture
def mocked():
    """The HTTP boundary to upstreams: every request must match a registered answer."""
    with responses_lib.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


@pytest.fixture
def dns(monkeypatch):
    """A DNS table for the test hosts (the sandbox has no resolver). Each host maps to a list of answers;
    successive lookups take successive answers (the last repeats), which models DNS rebinding."""
    table: dict[str, list[list[str]]] = {"api.provider.test": [["93.184.215.14"]]}
    calls: dict[str, int] = {}
    real = socket.getaddrinfo

    def fake(host, port, *args, **kwargs):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            return real(host, port, *args, **kwargs)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        index = min(calls.get(host, 0), len(table[host]) - 1)
        calls[host] = calls.get(host, 0) + 1
        return [
            (socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
            for ip in table[host][index]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return table


class RawUpstream:
    """A TCP server on 127.0.0.1 that answers every request with fixed bytes, headers included, then
    holds the connection for `hold_seconds` and closes it: answers no HTTP server library sends (a
    body shorter than its Content-Length, a body that stalls, a broken chunked encoding). With
    `keep_alive` it answers every request that comes on a connection until the client closes it."""

    def __init__(
        self,
        answer: bytes,
        *,
        hold_seconds: float = 0.0,
        rest: bytes = b"",
        rest_after: float = 0.0,
        keep_alive: bool = False,
    ) -> None:
        self.answer = answer
        self.rest, self.rest_after = rest, rest_after  # sent `rest_after` seconds after the answer
        self.keep_alive = keep_alive
        self.received: list[bytes] = []  # the head of every request, in order
        self.rest_sent: list[float] = []  # when each `rest` began to be sent (time.monotonic())
        self.connections = 0  # accepted
        self.hold = threading.Event()
        self.hold_seconds = hold_seconds
        raw = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                raw.connections += 1
                if not self.answer_one():
                    return
                while raw.keep_alive and self.answer_one():
                    pass
                raw.hold.wait(raw.hold_seconds)  # set at teardown, so no test waits for it

            def answer_one(self) -> bool:
                """Read one request and answer it; False when the client closed the connection first."""
                received = b""
                while b"\r\n\r\n" not in received:
                    piece = self.request.recv(65536)
                    if not piece:
                        return False
                    received += piece
                head, _, body = received.partition(b"\r\n\r\n")
                raw.received.append(head)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(body) < length:
                    body += self.request.recv(65536)
                self.request.sendall(raw.answer)
                if raw.rest:
                    raw.hold.wait(raw.rest_after)
                    raw.rest_sent.append(time.monotonic())
                    self.request.sendall(raw.rest)
                return True

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def raw_upstream_served(db, provider_key):
    """`raw_upstream_served(answer, hold_seconds=0)` → (the RawUpstream, an `openai` Upstream row
    served by it)."""
    servers: list[RawUpstream] = []

    def start(answer: bytes, *, hold_seconds: float = 0.0) -> tuple[RawUpstream, Any]:
        server = RawUpstream(answer, hold_seconds=hold_seconds)
        servers.append(server)
        upstream = upstream_make(
            name=f"raw-{len(servers)}",
            base_url=server.base_url,
            api_key_env=OPENAI_KEY_ENV,
            timeout_seconds=30,
        )
        return server, upstream

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def raw_upstream(raw_upstream_served):
    """`raw_upstream(answer, hold_seconds=0)` → an `openai` Upstream row served by a RawUpstream."""
    return lambda answer, *, hold_seconds=0.0: raw_upstream_served(answer, hold_seconds=hold_seconds)[1]
