"""upstreams/transport.py sends a request's head and body in one segment (core/corking.py) on a
kept-alive connection, over plain HTTP and over TLS (every real provider's): a real HTTP/1.1 server on
loopback, waiting in recv, records what each request's first read brought."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tls import self_signed_certificate
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
            self.requests_answer(conn)

    def requests_answer(self, conn: socket.socket) -> None:
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


def three_requests_sent(server: KeepAliveServer, *, scheme: str) -> list[bytes]:
    """Three requests with a late body through one transport (one kept-alive connection): what the
    server's read that woke for each got."""
    transport = Transport(base_url=f"{scheme}://127.0.0.1:{server.port}")
    url = f"{scheme}://127.0.0.1:{server.port}/v1/chat/completions"
    for _ in range(3):
        reply = transport.request("POST", url, timeout=(5, 5), data=late_body())
        assert reply.status == 200 and reply.body == b"{}"
    assert len(server.first_reads) == 3
    return server.first_reads


def assert_whole(read: bytes) -> None:
    assert read.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert read.endswith(b'{"model": "m"}\r\n' + BODY_END)


def test_a_request_on_a_kept_alive_connection_reaches_the_upstream_in_one_read(server):
    first, *kept_alive = three_requests_sent(server, scheme="http")
    # A new connection's first request goes out as urllib3 writes it: the head, then the body.
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and first.endswith(b"\r\n\r\n")
    # On the kept-alive connection, each request's head and body arrive together.
    for read in kept_alive:
        assert_whole(read)


class TLSKeepAliveServer(KeepAliveServer):
    """KeepAliveServer over TLS, decrypting in memory (`ssl.MemoryBIO`) so that it sees the TCP reads
    themselves: `first_reads` holds, per request, the plaintext of the records the read that woke for
    it got."""

    def __init__(self, *, cert: Path, key: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        super().__init__()

    def requests_answer(self, conn: socket.socket) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = self.context.wrap_bio(incoming, outgoing, server_side=True)

        def flush() -> None:
            if pending := outgoing.read():
                conn.sendall(pending)

        def plaintext() -> bytes:
            data = b""
            while True:
                try:
                    piece = tls.read(65536)
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    return data
                if not piece:
                    return data
                data += piece

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                flush()
                incoming.write(conn.recv(65536))
        flush()
        buffered = plaintext()  # what came with the handshake's last flight
        while True:
            if buffered:
                first, buffered = buffered, b""
            else:
                raw = conn.recv(65536)
                if not raw:
                    return
                incoming.write(raw)
                first = plaintext()
                flush()  # a TLS 1.3 server's session tickets
                if not first:
                    continue
            self.first_reads.append(first)
            received = first
            while not received.endswith(BODY_END):
                incoming.write(conn.recv(65536))
                received += plaintext()
            tls.write(ANSWER)
            flush()


@pytest.fixture
def tls_server(tmp_path, monkeypatch) -> Iterator[TLSKeepAliveServer]:
    cert, key = self_signed_certificate(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # the transport trusts it as it would a proxy's CA
    server = TLSKeepAliveServer(cert=cert, key=key)
    yield server
    server.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_over_tls_a_request_on_a_kept_alive_connection_reaches_the_upstream_in_one_read(tls_server):
    _, *kept_alive = three_requests_sent(tls_server, scheme="https")
    # On the kept-alive connection, each request's head record and body records arrive together.
    for read in kept_alive:
        assert_whole(read)
