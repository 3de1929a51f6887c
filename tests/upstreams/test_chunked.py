"""upstreams/chunked.py: a chunked body read straight off http.client's buffered socket reader, one
piece per read whatever the chunks, over a real socket (tests.images.conftest.RawUpstream)."""

from __future__ import annotations

import gzip
import http.client
import time

import pytest
import urllib3

from upstreams.chunked import chunked_body
from upstreams.errors import UpstreamError
from upstreams.transport import upstream_request

pytestmark = pytest.mark.django_db

EVENTS = [b'event: a\ndata: {"n": 1}\n\n', b"data: two\n\n", b"data: [DONE]\n\n"]


def chunked(pieces: list[bytes], *, extension: bytes = b"", trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(piece), extension, piece) for piece in pieces)
    return body + b"0\r\n" + trailer + b"\r\n"


def answer(body: bytes, *, headers: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        + headers
        + b"\r\n"
        + body
    )


def read_all(upstream) -> tuple[list[bytes], object]:
    reply = upstream_request(upstream=upstream, method="POST", url=f"{upstream.base_url}/chat", stream=True)
    raw = reply.streamed.raw
    pieces = list(reply.chunks(64 * 1024))
    return pieces, raw


def test_the_libraries_still_have_what_it_reads(raw_upstream):
    """Breaks when a urllib3 or Python release moves what upstreams/chunked.py relies on."""
    upstream = raw_upstream(answer(chunked(EVENTS)))
    reply = upstream_request(upstream=upstream, method="POST", url=f"{upstream.base_url}/chat", stream=True)
    raw = reply.streamed.raw
    assert urllib3.__version__.startswith("2.")
    assert isinstance(raw._fp, http.client.HTTPResponse)
    assert raw._fp.chunked is True and raw._fp.chunk_left is None
    assert hasattr(raw._fp.fp, "read1")
    assert chunked_body(raw) is not None
    reply.close()


def test_chunks_that_arrived_together_come_out_as_one_piece(raw_upstream):
    upstream = raw_upstream(answer(chunked(EVENTS, extension=b";ext=1", trailer=b"X-Trailer: 1\r\n")))

    pieces, raw = read_all(upstream)

    assert pieces == [b"".join(EVENTS)]  # the server sent it all at once: one read, one piece
    assert raw.connection is None  # read to its end: the connection went back to the pool


@pytest.mark.parametrize("size", [1, 3, 7, 64 * 1024])
def test_any_split_of_the_wire_gives_the_same_body(raw_upstream, size):
    upstream = raw_upstream(answer(chunked([b"x" * 70_000, *EVENTS])))
    reply = upstream_request(upstream=upstream, method="POST", url=f"{upstream.base_url}/chat", stream=True)

    assert b"".join(reply.chunks(size)) == b"x" * 70_000 + b"".join(EVENTS)


def test_a_body_cut_inside_a_chunk_is_an_error_whose_outcome_is_unknown(raw_upstream):
    upstream = raw_upstream(answer(b"20\r\n" + b"data: cut"))

    with pytest.raises(UpstreamError) as caught:
        read_all(upstream)

    assert caught.value.outcome_unknown and caught.value.status == 502


def test_a_broken_chunk_size_is_an_error(raw_upstream):
    upstream = raw_upstream(answer(b"zz\r\ndata: x\n\n\r\n0\r\n\r\n"))

    with pytest.raises(UpstreamError):
        read_all(upstream)


def test_an_encoded_body_is_read_through_urllib3_and_decoded(raw_upstream):
    body = gzip.compress(b"".join(EVENTS))
    upstream = raw_upstream(answer(chunked([body[:10], body[10:]]), headers=b"Content-Encoding: gzip\r\n"))

    pieces, _ = read_all(upstream)

    assert b"".join(pieces) == b"".join(EVENTS)


def test_the_connection_goes_back_to_the_pool_before_the_last_piece_is_handed_on(raw_upstream):
    """A relay stops reading at the final event: the body's end that came with it must not be lost."""
    upstream = raw_upstream(answer(chunked(EVENTS)))
    reply = upstream_request(upstream=upstream, method="POST", url=f"{upstream.base_url}/chat", stream=True)
    raw = reply.streamed.raw

    assert next(reply.chunks(64 * 1024)) == b"".join(EVENTS)
    assert raw.connection is None  # released, though the reader never asked for the end
    reply.close()


def test_a_connection_closed_inside_the_trailer_gives_the_body_but_is_not_reused(raw_upstream):
    upstream = raw_upstream(answer(chunked(EVENTS, trailer=b"X-Trailer: 1\r\n")[:-2]))

    pieces, raw = read_all(upstream)

    assert b"".join(pieces) == b"".join(EVENTS)
    assert raw.connection is not None  # not given back to the pool: closed with the reply


# After a stream's final event, its reader stops; the body's end may still be on its way
# (UpstreamReply.end_await, called by the text relay before it closes the reply).
BODY = chunked(EVENTS)
BODY_END = b"0\r\n\r\n"
BEFORE_END = BODY[: -len(BODY_END)]


def stopped_at_the_final_event(upstream):
    """The reply, read up to its final event, and its connection (whose `sock` is None once closed)."""
    reply = upstream_request(upstream=upstream, method="POST", url=f"{upstream.base_url}/chat", stream=True)
    assert next(reply.chunks(64 * 1024)) == b"".join(EVENTS)
    return reply, reply.streamed.raw.connection


def test_the_bodys_end_arriving_after_the_final_event_gives_the_connection_back(raw_upstream):
    upstream = raw_upstream(answer(BEFORE_END), rest=BODY_END, rest_after=0.05)
    reply, connection = stopped_at_the_final_event(upstream)

    reply.end_await(2.0)
    reply.close()

    assert connection.sock is not None  # read to its end: back to the pool, open


def test_without_waiting_for_the_bodys_end_the_connection_is_dropped(raw_upstream):
    upstream = raw_upstream(answer(BEFORE_END), rest=BODY_END, rest_after=0.05)
    reply, connection = stopped_at_the_final_event(upstream)

    reply.close()

    assert connection.sock is None  # what the relay did before it waited: closed, a new one next time


def test_a_body_whose_end_does_not_come_in_time_is_dropped(raw_upstream):
    upstream = raw_upstream(answer(BEFORE_END), rest=BODY_END, rest_after=2.0)
    reply, connection = stopped_at_the_final_event(upstream)

    started = time.monotonic()
    reply.end_await(0.05)
    waited = time.monotonic() - started
    reply.close()

    assert 0.04 < waited < 1.0
    assert connection.sock is None  # not read to its end: closed with the reply, not reused


def test_data_after_the_final_event_is_not_taken_for_the_bodys_end(raw_upstream):
    more = chunked([b"data: more\n\n"])[: -len(BODY_END)]  # an event after the final one, the body going on
    upstream = raw_upstream(answer(BEFORE_END), rest=more, rest_after=0.02)
    reply, connection = stopped_at_the_final_event(upstream)

    started = time.monotonic()
    reply.end_await(2.0)
    reply.close()

    assert time.monotonic() - started < 1.0  # it stopped at the data, not at the timeout
    assert connection.sock is None  # not read to its end: dropped
