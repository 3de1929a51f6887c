"""Requests to a URL the gateway did not choose go to the address its check saw (upstreams/pinned.py):
a name that rebinds between the check and the connection cannot send a download to another address,
and over TLS the certificate is still verified against the name, which is sent as SNI. DNS is faked
at `socket.getaddrinfo` (tests/rebinding.py); the servers are real, on loopback addresses."""

from __future__ import annotations

import io
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_network

import pytest
import requests
from PIL import Image
from requests.adapters import HTTPAdapter

from tests.rebinding import LoopbackPair, RebindingDns
from tests.tls import self_signed_certificate
from upstreams.errors import UrlRefused
from upstreams.pinned import PinnedHTTPAdapter
from upstreams.ssrf import url_target_resolve
from upstreams.url_fetch import url_fetch


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (0, 90, 200)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture
def only_127_0_0_1(settings):
    """127.0.0.1 is the operator's own network; 127.0.0.2 is a private address like any other."""
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.1/32"),)


@pytest.fixture
def pair():
    servers = LoopbackPair((200, {"Content-Type": "image/png"}, png()))
    yield servers
    servers.close()


def fetch(url: str) -> bytes:
    return url_fetch(
        url=url, deadline=time.monotonic() + 10, max_bytes=1_000_000, media_types=frozenset({"image/png"})
    ).data


# --- rebinding -------------------------------------------------------------------------------------


def test_a_download_reaches_the_address_checked_when_the_name_rebinds(only_127_0_0_1, pair, monkeypatch):
    dns = RebindingDns(monkeypatch, name="rebind.test", first="127.0.0.1", then="127.0.0.2")
    dns.armed = True

    assert fetch(f"http://rebind.test:{pair.port}/a.png") == png()

    assert pair.received["127.0.0.2"] == []
    [request] = pair.received["127.0.0.1"]
    assert (request.method, request.path) == ("GET", "/a.png")
    assert request.headers["host"] == f"rebind.test:{pair.port}"
    assert dns.lookups_armed == 1  # the check's lookup only: the connection resolved nothing


def test_a_redirect_hop_whose_name_rebinds_is_refused_before_anything_is_sent_there(
    only_127_0_0_1, pair, monkeypatch
):
    pair.get_answer = (302, {"Location": "/b.png"}, b"")
    dns = RebindingDns(monkeypatch, name="rebind.test", first="127.0.0.1", then="127.0.0.2")
    dns.armed = True

    with pytest.raises(UrlRefused, match="non-public"):
        fetch(f"http://rebind.test:{pair.port}/a.png")

    assert [r.path for r in pair.received["127.0.0.1"]] == ["/a.png"]
    assert pair.received["127.0.0.2"] == []


def test_an_address_that_cannot_be_connected_to_is_passed_over_for_the_next_one_checked(
    settings, pair, monkeypatch
):
    settings.GATEWAY_FETCH_PRIVATE_NETWORKS = (ip_network("127.0.0.0/29"),)
    # Nothing listens on 127.0.0.3 at the pair's port: the connection is refused, nothing is sent.
    RebindingDns(monkeypatch, name="two.test", first=("127.0.0.3", "127.0.0.1"), then="127.0.0.2")

    assert fetch(f"http://two.test:{pair.port}/a.png") == png()

    assert [(r.path, r.headers["host"]) for r in pair.received["127.0.0.1"]] == [
        ("/a.png", f"two.test:{pair.port}")
    ]
    assert pair.received["127.0.0.2"] == []


# --- the pinned URL --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "answer", "pinned_url", "host_header"),
    [
        (
            "https://name.test/a.png?x=1#f",
            "93.184.215.14",
            "https://93.184.215.14:443/a.png?x=1#f",
            "name.test",
        ),
        ("http://name.test:8080/", "93.184.215.14", "http://93.184.215.14:8080/", "name.test:8080"),
        ("http://name.test", "93.184.215.14", "http://93.184.215.14:80", "name.test"),
        ("https://name.test/", "2606:2800:220:1::1", "https://[2606:2800:220:1::1]:443/", "name.test"),
    ],
)
def test_the_pinned_url_names_the_address_checked_and_the_host_header_the_name(
    monkeypatch, url, answer, pinned_url, host_header
):
    RebindingDns(monkeypatch, name="name.test", first=answer, then=answer)

    target = url_target_resolve(url=url)

    assert (target.pinned_url, target.host_header) == (pinned_url, host_header)


# --- TLS to a pinned address -----------------------------------------------------------------------


class TlsServer:
    """An https server on 127.0.0.1 with a certificate for `name`, keeping the SNI names and Host
    headers it was sent."""

    def __init__(self, directory, name: str) -> None:
        self.cert, key = self_signed_certificate(directory, name=f"DNS:{name}")
        self.server_names: list[str | None] = []
        self.hosts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hosts.append(self.headers.get("Host", ""))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, key)
        context.sni_callback = lambda _sock, sni, _ctx: self.server_names.append(sni)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def tls_server(tmp_path):
    server = TlsServer(tmp_path, "pinned.test")
    yield server
    server.close()


def pinned_get(session: requests.Session, url: str, cert) -> requests.Response:
    target = url_target_resolve(url=url)
    return session.get(target.pinned_url, headers={"Host": target.host_header}, verify=str(cert), timeout=5)


def pinned_session(adapter: HTTPAdapter) -> requests.Session:
    session = requests.Session()
    session.trust_env = False
    session.mount("https://", adapter)
    return session


def test_tls_to_a_pinned_address_verifies_the_name_and_sends_it_as_sni(
    only_127_0_0_1, tls_server, monkeypatch
):
    RebindingDns(monkeypatch, name="pinned.test", first="127.0.0.1", then="127.0.0.1")

    response = pinned_get(
        pinned_session(PinnedHTTPAdapter()), f"https://pinned.test:{tls_server.port}/", tls_server.cert
    )

    assert (response.status_code, response.text) == (200, "ok")
    assert tls_server.server_names == ["pinned.test"]
    assert tls_server.hosts == [f"pinned.test:{tls_server.port}"]


def test_tls_to_a_pinned_address_refuses_a_certificate_for_another_name(
    only_127_0_0_1, tls_server, monkeypatch
):
    RebindingDns(monkeypatch, name="other.test", first="127.0.0.1", then="127.0.0.1")

    with pytest.raises(requests.exceptions.SSLError, match=r"other\.test"):
        pinned_get(
            pinned_session(PinnedHTTPAdapter()), f"https://other.test:{tls_server.port}/", tls_server.cert
        )

    assert tls_server.server_names == ["other.test"]
    assert tls_server.hosts == []


def test_without_the_pinned_adapter_the_address_would_be_verified_and_the_names_certificate_refused(
    only_127_0_0_1, tls_server, monkeypatch
):
    RebindingDns(monkeypatch, name="pinned.test", first="127.0.0.1", then="127.0.0.1")

    with pytest.raises(requests.exceptions.SSLError):
        pinned_get(pinned_session(HTTPAdapter()), f"https://pinned.test:{tls_server.port}/", tls_server.cert)

    assert tls_server.hosts == []


def test_each_name_on_one_address_gets_its_own_verified_connections(only_127_0_0_1, tmp_path, monkeypatch):
    """One adapter, one address, two names: the name's pool is not reused for the other name."""
    good = TlsServer(tmp_path, "pinned.test")
    try:
        RebindingDns(monkeypatch, name="pinned.test", first="127.0.0.1", then="127.0.0.1")
        session = pinned_session(PinnedHTTPAdapter())
        assert pinned_get(session, f"https://pinned.test:{good.port}/", good.cert).status_code == 200
        RebindingDns(monkeypatch, name="other.test", first="127.0.0.1", then="127.0.0.1")
        with pytest.raises(requests.exceptions.SSLError):
            pinned_get(session, f"https://other.test:{good.port}/", good.cert)
        assert good.hosts == [f"pinned.test:{good.port}"]
    finally:
        good.close()
