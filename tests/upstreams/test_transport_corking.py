"""upstreams/transport.py sends a request's head and body in one segment (core/corking.py) on a
kept-alive connection: a real HTTP/1.1 server on loopback, waiting in recv, records what each
request's first read brought."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from upstreams.transport import Transport

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_CORK"), reason="TCP_CORK is Linux's")

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
BODY_END = b"0\r\n\r\n"  # the end of a chunked body


class KeepAliveServer:
    """Answers every request on one kept-alive connection; `first_reads` holds, per request, what the
    read that woke for it got."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.first_reads: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while first := conn.recv(65536):
                self.first_reads.append(first)
                received = first
                while not received.endswith(BODY_END):
                    received += conn.recv(65536)
                conn.sendall(ANSWER)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    server = KeepAliveServer()
    yield server
    server.close()


def late_body() -> Iterator[bytes]:
    """A body whose bytes come 50 ms after the head is written: sent as they are written, the head
    reaches the server alone."""
    time.sleep(0.05)
    yield b'{"model": "m"}'


def test_a_request_on_a_kept_alive_connection_reaches_the_upstream_in_one_read(server):
    transport = Transport(base_url=f"http://127.0.0.1:{server.port}")
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    for _ in range(3):
        reply = transport.request("POST", url, timeout=(5, 5), data=late_body())
        assert reply.status == 200 and reply.body == b"{}"

    first, *kept_alive = server.first_reads
    # A new connection's first request goes out as urllib3 writes it: the head, then the body.
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and first.endswith(b"\r\n\r\n")
    # On the kept-alive connection, each request's head and body arrive together.
    assert len(kept_alive) == 2
    for read in kept_alive:
        assert read.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert read.endswith(b'{"model": "m"}\r\n' + BODY_END)
