"""Upstream response heads parsed without the email package (`images.providers.headers`) come out
exactly as http.client's own parser makes them, well-formed or not."""

from __future__ import annotations

import http.client
import io
import socket

import pytest

from images.providers.base import transport_for
from images.providers.headers import UpstreamHTTPConnectionPool, UpstreamResponse, headers_parse
from tests.images.test_upstream_http import http_answer

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
    return {
        "items": message.items(),
        "payload": message.get_payload(),
        "defects": [type(defect) for defect in message.defects],
        "unixfrom": message.get_unixfrom(),
        "text": message.as_string(),
        "class": type(message),
    }


@pytest.mark.parametrize("block", BLOCKS.values(), ids=BLOCKS.keys())
def test_a_header_block_parses_as_http_client_parses_it(block):
    expected = http.client.parse_headers(io.BytesIO(block))
    assert _described(headers_parse(_lines(block))) == _described(expected)


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
