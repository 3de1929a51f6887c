"""DNS rebinding, for the request-forgery tests: a name whose lookups answer one address and then
another (`RebindingDns`, at the boundary the gateway resolves names through, `socket.getaddrinfo`),
and real HTTP servers on 127.0.0.1 and 127.0.0.2 on one port (`LoopbackPair`), each keeping the
requests it got, so a test sees which address a request reached."""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names in lowercase
    body: bytes


class RebindingDns:
    """`name` resolves to `first` until `armed`; once armed, to `first` for `checked` more lookups
    (what the gateway's check asks) and to `then` on every later one. Every other name is unknown; IP
    literals resolve as themselves. `first` may be several addresses, answered in that order."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        *,
        name: str,
        first: str | tuple[str, ...],
        then: str,
        checked: int = 1,
    ) -> None:
        self.name, self.first, self.then, self.checked = name, first, then, checked
        self.armed = False
        self.lookups_armed = 0
        real = socket.getaddrinfo

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                pass
            else:
                return real(host, port, *args, **kwargs)
            if host != self.name:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            answer = self.first
            if self.armed:
                self.lookups_armed += 1
                answer = self.first if self.lookups_armed <= self.checked else self.then
            addresses = (answer,) if isinstance(answer, str) else answer
            return [info for address in addresses for info in real(address, port, *args, **kwargs)]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


class LoopbackPair:
    """HTTP servers on 127.0.0.1 (`checked`) and 127.0.0.2 (`rebound`) on one port. A GET is
    answered `get_answer` (status, headers, body), a POST 200."""

    def __init__(self, get_answer: tuple[int, dict[str, str], bytes] = (200, {}, b"")) -> None:
        self.get_answer = get_answer
        self.received: dict[str, list[Received]] = {"127.0.0.1": [], "127.0.0.2": []}
        self.servers: list[ThreadingHTTPServer] = []
        for _ in range(20):  # a port free on both addresses
            rebound = ThreadingHTTPServer(("127.0.0.2", 0), self._handler("127.0.0.2"))
            try:
                checked = ThreadingHTTPServer(
                    ("127.0.0.1", rebound.server_address[1]), self._handler("127.0.0.1")
                )
            except OSError:
                rebound.server_close()
                continue
            self.servers = [checked, rebound]
            break
        else:
            raise RuntimeError("no port free on both 127.0.0.1 and 127.0.0.2")
        self.port = int(self.servers[0].server_address[1])
        for server in self.servers:
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def _handler(self, address: str) -> type[BaseHTTPRequestHandler]:
        pair = self

        class Handler(BaseHTTPRequestHandler):
            def _keep(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {name.lower(): value for name, value in self.headers.items()}
                pair.received[address].append(Received(self.command, self.path, headers, body))

            def do_GET(self) -> None:
                self._keep()
                status, headers, body = pair.get_answer
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self._keep()
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
