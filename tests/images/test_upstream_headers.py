"""Upstream response heads parsed without the email package (`upstreams.providers.headers`) come out
exactly as http.client's own parser makes them, well-formed or not."""

from __future__ import annotations

import http.client
import io
import socket

import pytest
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.util.request import SKIP_HEADER

from tests.gevent_probe import gevent_probe_run
from tests.images.test_upstream_http import http_answer
from upstreams.providers.base import transport_for
from upstreams.providers.headers import (
    UpstreamHTTPConnection,
    UpstreamHTTPConnectionPool,
    UpstreamHTTPSConnection,
    UpstreamResponse,
    headers_parse,
)

BLOCKS = {
    "plain": b"Content-Type: application/json\r\nContent-Length: 12\r\nDate: Sat, 21 Nov 2026\r\n\r\n",
    "none": b"\r\n",
    "lf endings": b"Content-Type: text/plain\nX-A: 1\n\n",
    "mixed endings": b"X-A: 1\nX-B: 2\r\n\r\n",
    "repeated": b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nset-cookie: c=3\r\n\r\n",
    "folded with a space": b"X-Long: first\r\n second\r\nX-B: 2\r\n\r\n",
    "folded with a tab": b"X-Long: first\r\n\tsecond\r\n\r\n",
    "empty values": b"X-Empty:\r\nX-Blank: \r\nX-Tab:\t\r\n\r\n",
    "trailing spaces kept": b"X-A: value  \r\n\r\n",
    "colon in the value": b"Location: http://example.test:8080/a?b=c:d\r\n\r\n",
    "latin-1": b"X-Name: caf\xe9 \xff\r\n\r\n",
    "bare cr inside a value": b"X-A: one\rtwo\r\nX-B: 2\r\n\r\n",
    "line without a colon": b"X-A: 1\r\ngarbage\r\nX-B: 2\r\n\r\n",
    "continuation first": b" folded\r\nX-A: 1\r\n\r\n",
    "space before the colon": b"X-A : 1\r\n\r\n",
    "empty name": b": value\r\nX-A: 1\r\n\r\n",
    "mbox from line": b"From someone\r\nX-A: 1\r\n\r\n",
    "from field": b"From: someone@example.test\r\n\r\n",
    "end of file before the blank line": b"X-A: 1\r\nX-B: 2\r\n",
    "end of file mid-line": b"X-A: 1\r\nX-B: 2",
}


def _lines(block: bytes) -> list[bytes]:
    return http.client._read_headers(io.BytesIO(block))  # type: ignore[attr-defined]


def _described(message: http.client.HTTPMessage) -> dict:
    """Everything urllib3 and requests read of a message, each way it can be read."""
    names = sorted({name.lower() for name in message} | {"x-absent"})
    return {
        "items": message.items(),
        "values": message.values(),
        "get": {name: (message.get(name), message[name], message.get(name, "-")) for name in names},
        "get_all": {name: (message.get_all(name), message.get_all(name, [])) for name in names},
        "payload": message.get_payload(),
        "multipart": message.is_multipart(),
        "defects": [type(defect) for defect in message.defects],
        "unixfrom": message.get_unixfrom(),
        "text": message.as_string(),
        "an HTTPMessage": isinstance(message, http.client.HTTPMessage),
    }


@pytest.mark.parametrize("block", BLOCKS.values(), ids=BLOCKS.keys())
def test_a_header_block_parses_as_http_client_parses_it(block):
    expected = http.client.parse_headers(io.BytesIO(block))
    assert _described(headers_parse(_lines(block))) == _described(expected)


def test_a_value_stored_later_reads_back_as_the_email_package_reads_it():
    """Values set after parsing (urllib3 re-sets normalized ones; a cookie jar may add some) are read
    through the policy unless they are plain ASCII text: surrogate escapes still become a Header."""
    block = BLOCKS["plain"]
    ours, theirs = headers_parse(_lines(block)), http.client.parse_headers(io.BytesIO(block))
    for message in (ours, theirs):
        message["X-Escaped"] = "caf\udce9"
        message["X-Plain"] = "plain"
    assert _described(ours) == _described(theirs)
    assert not isinstance(ours["X-Escaped"], str)


PLAIN = [
    "plain", "none", "lf endings", "mixed endings", "repeated", "folded with a space", "folded with a tab",
    "empty values", "trailing spaces kept", "colon in the value", "latin-1", "from field",
]  # fmt: skip


def test_only_irregular_blocks_go_to_the_email_parser(monkeypatch):
    handed_over = []
    full_parser = http.client.parse_headers
    monkeypatch.setattr(
        http.client, "parse_headers", lambda fp: handed_over.append(fp.getvalue()) or full_parser(fp)
    )
    for block in BLOCKS.values():
        headers_parse(_lines(block))
    assert handed_over == [block for name, block in BLOCKS.items() if name not in PLAIN]


RESPONSES = {
    "content length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "chunked, folded": b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "100 continue first": (
        b"HTTP/1.1 100 Continue\r\nX-Early: 1\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    ),
    "http/1.0 without length": b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close",
    "connection close": b"HTTP/1.1 500 Server Error\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbad",
    "no content": b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
    "negative length": b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nrest",
    "invalid length": b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\nrest",
    "malformed head": b"HTTP/1.1 200 OK\r\nX-A: 1\r\ngarbage\r\nContent-Length: 2\r\n\r\nok",
    "unknown protocol": b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "not http": b"SSH-2.0-OpenSSH_9.2\r\n",
}


def _read(response_class: type[http.client.HTTPResponse], raw: bytes, method: str) -> dict:
    """What a response of `response_class` makes of `raw`, read from a real socket."""
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(raw)
        theirs.shutdown(socket.SHUT_WR)
        response = response_class(ours, method=method)
        try:
            response.begin()
        except Exception as error:  # compared by type and text
            return {"error": (type(error), str(error))}
        state = {
            name: getattr(response, name)
            for name in ("status", "reason", "version", "chunked", "length", "will_close")
        }
        return {**state, "headers": _described(response.msg), "body": response.read()}
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("method", ["POST", "HEAD"])
@pytest.mark.parametrize("raw", RESPONSES.values(), ids=RESPONSES.keys())
def test_a_response_begins_as_http_clients_own_does(raw, method):
    assert _read(UpstreamResponse, raw, method) == _read(http.client.HTTPResponse, raw, method)


def test_upstream_transports_read_their_answers_with_it(raw_upstream_served):
    server, upstream = raw_upstream_served(http_answer("X-Folded: one\r\n two", "Set-Cookie: a=1"))
    transport = transport_for(upstream)
    response = transport.session.post(f"{server.base_url}/images/generations", data=b"{}", timeout=5)
    assert response.status_code == 200
    assert isinstance(response.raw._original_response, UpstreamResponse)
    assert isinstance(next(iter(transport.adapter._pools.values())), UpstreamHTTPConnectionPool)
    assert response.headers["X-Folded"] == "one two"  # urllib3 unfolds what the message keeps folded
    assert response.json()["data"][0]["url"] == "https://api.provider.test/a.png"


# --- a pooled connection's check before reuse ------------------------------------------------------


def _connection_states(connection_class: type) -> dict[str, bool]:
    """`is_connected` of a connection of `connection_class` whose socket is idle, has unread bytes,
    has reached the end (the server closed it), or is gone."""
    states = {}
    for state in ("idle", "unread bytes", "closed by the server", "no socket"):
        ours, theirs = socket.socketpair()
        try:
            connection = connection_class("upstream.test")
            connection.sock = ours
            if state == "unread bytes":
                theirs.sendall(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
            elif state == "closed by the server":
                theirs.close()
            elif state == "no socket":
                connection.sock = None
            states[state] = connection.is_connected
        finally:
            ours.close()
            theirs.close()
    return states


CONNECTION_CLASSES = [(UpstreamHTTPConnection, HTTPConnection), (UpstreamHTTPSConnection, HTTPSConnection)]


@pytest.mark.parametrize(("ours", "urllib3s"), CONNECTION_CLASSES)
def test_a_pooled_connection_is_checked_as_urllib3_checks_it(ours, urllib3s):
    assert (
        _connection_states(ours)
        == _connection_states(urllib3s)
        == {
            "idle": True,
            "unread bytes": False,
            "closed by the server": False,
            "no socket": False,
        }
    )


# In a fresh interpreter patched by gevent (tests/gevent_probe.py): each class's answers for the
# four states, and how many gevent poll objects its checks made.
GEVENT_PROBE = """
import json

import django

django.setup()  # the helper below comes from a test module that imports the models

from urllib3.connection import HTTPConnection

from upstreams.providers.headers import UpstreamHTTPConnection
from tests.images.test_upstream_headers import _connection_states

found = {}
for connection_class in (UpstreamHTTPConnection, HTTPConnection):
    polls[0] = 0
    states = _connection_states(connection_class)
    found[connection_class.__name__] = {"states": states, "gevent polls": polls[0]}
print(json.dumps(found))
"""


def test_in_a_gevent_worker_the_check_never_builds_a_gevent_poll():
    found = gevent_probe_run(GEVENT_PROBE, env={"DJANGO_SETTINGS_MODULE": "gateway_project.settings"})
    assert found["UpstreamHTTPConnection"]["states"] == found["HTTPConnection"]["states"]
    assert found["UpstreamHTTPConnection"]["gevent polls"] == 0
    # urllib3's own: one per check of a socket (and one to find out whether poll works at all)
    assert found["HTTPConnection"]["gevent polls"] >= 3


# --- a request written in one piece ----------------------------------------------------------------

JSON_HEADERS = {
    "User-Agent": "image-gateway/0.1",
    "Accept-Encoding": "gzip, deflate",
    "Accept": "*/*",
    "Connection": "keep-alive",
    "Authorization": "Bearer sk-upstream",
    "Content-Type": "application/json",
    "Content-Length": "16",
}
REQUESTS = {
    "json body": ("POST", "/v1/images/generations", JSON_HEADERS, b'{"prompt": "owl"}'[:16], {}),
    "no body": ("POST", "/v1/images/generations", {**JSON_HEADERS, "Content-Length": "0"}, None, {}),
    "empty body": ("POST", "/v1/x", {**JSON_HEADERS, "Content-Length": "0"}, b"", {}),
    "host given": ("GET", "/a?b=c", {**JSON_HEADERS, "Host": "other.test"}, None, {}),
    "bytes and latin-1 values": (
        "POST",
        "/x",
        {**JSON_HEADERS, "X-Bytes": b"raw", "X-Latin": "caf\xe9", "Content-Length": "2"},
        b"ok",
        {},
    ),
    "no accept-encoding": ("POST", "/x", {"User-Agent": "u", "Content-Length": "2"}, b"ok", {}),
    # urllib3's own path: no Content-Length, no User-Agent, chunked, an iterable body, a skipped header
    "no content-length": ("POST", "/x", {"User-Agent": "u"}, b"ok", {}),
    "no user-agent": ("POST", "/x", {"Content-Length": "2"}, b"ok", {}),
    "chunked": ("POST", "/x", {"User-Agent": "u"}, b"ok", {"chunked": True}),
    "iterable body": ("POST", "/x", {"User-Agent": "u", "Content-Length": "2"}, [b"o", b"k"], {}),
    "skipped user-agent": ("POST", "/x", {"User-Agent": SKIP_HEADER, "Content-Length": "2"}, b"ok", {}),
    # refused as http.client refuses them
    "header name with a space": ("POST", "/x", {**JSON_HEADERS, "Bad Name": "1"}, b"", {}),
    "header value with a line break": ("POST", "/x", {**JSON_HEADERS, "X-A": "1\r\nX-B: 2"}, b"", {}),
    "value beyond latin-1": ("POST", "/x", {**JSON_HEADERS, "X-A": "\u20ac"}, b"", {}),
    "name beyond ascii": ("POST", "/x", {**JSON_HEADERS, "X-\xe9": "1"}, b"", {}),
    "control character in the path": ("POST", "/x\r\nX-Evil: 1", JSON_HEADERS, b"", {}),
}


class _CountedSocket:
    """A socket that counts its writes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.writes = sock, 0

    def sendall(self, data: bytes) -> None:
        self.writes += 1
        self.sock.sendall(data)

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)


def _written(connection_class: type, method: str, url: str, headers: dict, body, options: dict) -> dict:
    """What a connection of `connection_class` writes for a request, and the state it is left in."""
    ours, theirs = socket.socketpair()
    try:
        connection = connection_class("upstream.test", 8080)
        connection.sock = counted = _CountedSocket(ours)
        try:
            connection.request(method, url, body=body, headers=headers, **options)
            error = None
        except Exception as exc:  # compared by type and text
            error = (type(exc), str(exc))
        ours.shutdown(socket.SHUT_WR)
        written = b"".join(iter(lambda: theirs.recv(65536), b""))
        return {
            "bytes": written,
            "error": error,
            "state": connection._HTTPConnection__state,
            "options": connection._response_options,
            "writes": min(counted.writes, 1) if error else counted.writes,
        }
    finally:
        ours.close()
        theirs.close()


ONE_WRITE = ["json body", "empty body", "bytes and latin-1 values", "no accept-encoding"]


@pytest.mark.parametrize(("ours", "urllib3s"), CONNECTION_CLASSES)
@pytest.mark.parametrize("case", REQUESTS.values(), ids=REQUESTS.keys())
def test_a_request_goes_out_as_urllib3_writes_it(ours, urllib3s, case):
    sent, expected = _written(ours, *case), _written(urllib3s, *case)
    assert {**sent, "writes": None} == {**expected, "writes": None}
    body = case[3]
    if case in [REQUESTS[name] for name in ONE_WRITE] and body:
        assert (sent["writes"], expected["writes"]) == (1, 2)  # the head and the body in one write
    else:
        assert sent["writes"] == expected["writes"]


def test_a_second_request_before_the_answer_is_refused_as_http_client_refuses_it():
    method, url, headers, body, _ = REQUESTS["json body"]
    for connection_class in (UpstreamHTTPConnection, HTTPConnection):
        ours, theirs = socket.socketpair()
        try:
            connection = connection_class("upstream.test", 8080)
            connection.sock = ours
            connection.request(method, url, body=body, headers=headers)
            with pytest.raises(http.client.CannotSendRequest):
                connection.request(method, url, body=body, headers=headers)
        finally:
            ours.close()
            theirs.close()
