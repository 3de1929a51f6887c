"""deploy/nginx.conf in front of the gateway, as deployed: Debian's nginx running that file (its
addresses replaced) before gunicorn with gunicorn.conf.py (one gevent worker, 1000 connections).

What the proxy is there for: a flood of clients that open connections and never finish their request
head would fill gunicorn's worker (it reads heads without a time limit); behind nginx it costs other
callers nothing. What it must not break: streamed answers arrive event by event, as the upstream
produces them. And the gateway believes the client's address from nginx only.

Loopback only; PostgreSQL (the server shares the test database) and nginx installed, skipped otherwise.
"""

from __future__ import annotations

import http.client
import itertools
import json
import selectors
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from django.db import connection

from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from keys.services import api_key_create
from tests.factories import image_model_make, text_model_make
from tests.fake_text_upstream import CHAT
from tests.gunicorn_server import gunicorn_serving
from tests.nginx_process import NGINX, nginx_serving

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.skipif(NGINX is None, reason="needs nginx (apt-get install nginx)"),
    pytest.mark.django_db(transaction=True),
]

GEN = "/v1/images/generations"
FLOOD = 2000  # twice the connections gunicorn's one worker holds (GUNICORN_WORKER_CONNECTIONS)
# A request head that is never finished: the client holds its connection open after this.
PARTIAL_HEAD = b"POST /v1/images/generations HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


@pytest.fixture
def key(alice, alpha_group, fake_upstream_make):
    upstream = fake_upstream_make("fake-openai")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[upstream], price="0.25")
    return api_key_create(account=alice, group=alpha_group, label="proxy")[1]


@pytest.fixture
def gateway(key, tmp_path):
    """(the node's own URL, nginx, the node's access log): one node trusting nginx's address."""
    access_log = tmp_path / "access.log"
    env = {
        "GUNICORN_WORKER_CLASS": "",  # gevent, as deployed on PostgreSQL
        "GUNICORN_ACCESSLOG": str(access_log),
        "GATEWAY_TRUSTED_PROXIES": "127.0.0.1",
    }
    with gunicorn_serving(log_path=tmp_path / "gunicorn.log", env=env) as node_url:
        host_port = node_url.removeprefix("http://")
        with nginx_serving([host_port]) as nginx:
            yield node_url, nginx, access_log


def image_call(base_url: str, key: str, *, timeout: float = 10, **kwargs) -> requests.Response:
    return requests.post(
        f"{base_url}{GEN}",
        json={"model": "alpha-fake", "prompt": "probe"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout,
        **kwargs,
    )


@contextmanager
def slow_header_flood(url: str, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections to `url` that each send part of a request head and then hold it, opened
    without a thread each (non-blocking connects over one selector); all closed when the block ends."""
    host, port = url.removeprefix("http://").split(":")
    sockets: list[socket.socket] = []
    selector = selectors.DefaultSelector()
    try:
        for _ in range(count):
            sock = socket.socket()
            sockets.append(sock)
            sock.setblocking(False)
            sock.connect_ex((host, int(port)))
            selector.register(sock, selectors.EVENT_WRITE)
        pending, deadline = count, time.monotonic() + 20
        while pending:
            assert time.monotonic() < deadline, f"{pending} flood connections never connected"
            for selected, _ in selector.select(timeout=1):
                sock = selected.fileobj
                selector.unregister(sock)
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                sock.send(PARTIAL_HEAD)
                pending -= 1
        time.sleep(0.3)  # let the server take them in
        yield sockets
    finally:
        selector.close()
        for sock in sockets:
            sock.close()


def timed(call) -> tuple[float, object]:
    started = time.monotonic()
    result = call()
    return time.monotonic() - started, result


def test_it_keeps_serving_other_callers_while_a_slow_header_flood_holds_thousands_of_connections(
    gateway, key
):
    node_url, nginx, _ = gateway

    with slow_header_flood(nginx.url, FLOOD):
        seconds, response = timed(lambda: image_call(nginx.url, key))
        later_seconds, later = timed(lambda: image_call(nginx.url, key))

    assert response.status_code == 200, response.text
    assert later.status_code == 200
    assert seconds < 1 and later_seconds < 1

    # The same flood straight at gunicorn fills its worker: the next caller is not even read.
    with slow_header_flood(node_url, FLOOD), pytest.raises(requests.ReadTimeout):
        image_call(node_url, key, timeout=2)
    # Once the flood is gone, it serves again.
    assert image_call(node_url, key).status_code == 200


@pytest.fixture
def chat_key(chat_group, fake_upstream_make):
    upstream = fake_upstream_make("fake-openai-text")
    text_model_make(model_id="demo-chat", group=chat_group, upstreams=[upstream])
    account = account_create(username="carol", email="carol@example.com")
    account_set_groups(account=account, allowed_groups=[chat_group], current_group=chat_group)
    wallet_top_up(account=account, amount="10.00", reference="fixture")
    return api_key_create(account=account, group=chat_group, label="streams")[1]


EVENT_DELAY = 0.15


def stream_arrivals(base_url: str, key: str, **kwargs) -> list[tuple[float, bytes]]:
    """A streamed chat completion: each event's payload with the seconds after the call began when it
    arrived."""
    started = time.monotonic()
    response = requests.post(
        f"{base_url}{CHAT}",
        json={
            "model": "demo-chat",
            "messages": [{"role": "user", "content": "one two three four five six"}],
            "stream": True,
        },
        headers={"Authorization": f"Bearer {key}"},
        stream=True,
        timeout=30,
        **kwargs,
    )
    assert response.status_code == 200, response.text
    arrivals = []
    for line in response.iter_lines():
        if line.startswith(b"data: "):
            arrivals.append((time.monotonic() - started, line[6:]))
    return arrivals


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_it_passes_stream_events_on_as_the_upstream_produces_them(gateway, chat_key, fake_upstream, scheme):
    _, nginx, _ = gateway
    fake_upstream.script(CHAT, {"event_delay": EVENT_DELAY})
    base_url, verify = (nginx.url, True) if scheme == "http" else (nginx.tls_url, str(nginx.cert))

    arrivals = stream_arrivals(base_url, chat_key, verify=verify)

    assert arrivals[-1][1] == b"[DONE]"
    assert json.loads(arrivals[0][1])["choices"][0]["delta"]["role"] == "assistant"
    # The upstream spaced its events EVENT_DELAY apart; buffered by nginx they would all arrive at
    # the end, within a few milliseconds of each other.
    spread = arrivals[-1][0] - arrivals[0][0]
    assert spread >= (len(arrivals) - 2) * EVENT_DELAY * 0.8, arrivals
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(arrivals)]
    assert sum(gap >= EVENT_DELAY * 0.5 for gap in gaps) >= len(gaps) - 2


def call_from(source: str, url: str, key: str, headers: dict[str, str]) -> int:
    """An image call from a given loopback address (127.0.0.0/8 is all this machine's)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    try:
        body = json.dumps({"model": "alpha-fake", "prompt": "from"})
        conn.request(
            "POST",
            GEN,
            body,
            {"Authorization": f"Bearer {key}", "Content-Type": "application/json", **headers},
        )
        return conn.getresponse().status
    finally:
        conn.close()


def logged_addresses(access_log: Path, count: int) -> list[str]:
    deadline = time.monotonic() + 5
    while True:
        lines = [line for line in access_log.read_text().splitlines() if GEN in line]
        if len(lines) >= count or time.monotonic() > deadline:
            return [line.split()[0] for line in lines]
        time.sleep(0.05)


def test_it_sees_the_clients_address_through_nginx_and_ignores_it_from_anyone_else(gateway, key):
    node_url, nginx, access_log = gateway
    claimed = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}

    # Through nginx (trusted) from 127.0.0.2: nginx appends that address to the one the client
    # claimed, and the gateway takes the last untrusted one. Straight at the node from 127.0.0.3,
    # the claim is dropped.
    assert call_from("127.0.0.2", nginx.url, key, claimed) == 200
    assert call_from("127.0.0.3", node_url, key, claimed) == 200

    assert logged_addresses(access_log, 2) == ["127.0.0.2", "127.0.0.3"]


def test_it_refuses_a_body_over_the_limit_in_json_before_any_node_reads_it(gateway, key):
    _, nginx, _ = gateway
    host, port = nginx.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest("POST", GEN)
        conn.putheader("Authorization", f"Bearer {key}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(27 * 1024 * 1024))
        conn.endheaders()  # no body: nginx answers from the declared length alone
        response = conn.getresponse()
        status, content_type, body = response.status, response.getheader("Content-Type"), response.read()
    finally:
        conn.close()

    assert (status, content_type) == (413, "application/json")
    assert json.loads(body)["error"]["code"] == "request_too_large"
