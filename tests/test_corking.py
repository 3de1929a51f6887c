"""core/corking.py over real loopback TCP connections: what is written corked reaches a waiting reader
in one read once uncorked, and what cannot be corked is written as usual; and the streamed answer's
body that corks its first write (api/answers.py `FirstWriteCorked`). Through gunicorn:
tests/chat/test_sdk_e2e.py, `test_a_streams_head_and_first_event_reach_a_waiting_caller_in_one_read`."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from api.answers import FirstWriteCorked
from core.corking import socket_cork, socket_uncork

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_CORK"), reason="TCP_CORK is Linux's")

HEAD = b"HTTP/1.1 200 OK\r\n\r\n"
EVENT = b"data: first\n\n"


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        writer = socket.create_connection(server.getsockname())
        reader, _ = server.accept()
    writer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as gunicorn's and urllib3's are
    reader.settimeout(5)
    with writer, reader:
        yield writer, reader


def first_read(reader: socket.socket) -> Callable[[], bytes]:
    """Start a read that waits for the first bytes to arrive, as a client waiting for an answer does;
    the function returned gives what that one read got."""
    got: list[bytes] = []
    thread = threading.Thread(target=lambda: got.append(reader.recv(65536)))
    thread.start()
    time.sleep(0.05)  # the reader is waiting in recv

    def result() -> bytes:
        thread.join(5)
        return got[0]

    return result


def test_parts_written_corked_reach_a_waiting_reader_in_one_read(tcp_pair):
    writer, reader = tcp_pair
    read = first_read(reader)
    assert socket_cork(writer)
    writer.sendall(HEAD)
    time.sleep(0.05)  # uncorked, the reader would wake for the head alone meanwhile
    writer.sendall(EVENT)
    socket_uncork(writer)
    assert read() == HEAD + EVENT


def test_without_the_cork_a_waiting_reader_wakes_for_the_first_part_alone(tcp_pair):
    # The control for the test above.
    writer, reader = tcp_pair
    read = first_read(reader)
    writer.sendall(HEAD)
    time.sleep(0.05)
    writer.sendall(EVENT)
    assert read() == HEAD


def test_after_the_uncork_each_write_leaves_at_once(tcp_pair):
    writer, reader = tcp_pair
    socket_cork(writer)
    socket_uncork(writer)
    assert writer.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) == 0
    read = first_read(reader)
    started = time.monotonic()
    writer.sendall(b"one")
    assert read() == b"one"
    assert time.monotonic() - started < 0.15  # not held for the kernel's 200 ms


def test_what_is_not_a_tcp_socket_is_not_corked():
    a, b = socket.socketpair()
    with a, b:
        assert socket_cork(a) is False
        a.sendall(b"as usual")
        assert b.recv(100) == b"as usual"
    assert socket_cork(None) is False


def test_a_closed_socket_is_neither_corked_nor_an_error_to_uncork(tcp_pair):
    writer, _ = tcp_pair
    writer.close()
    assert socket_cork(writer) is False
    socket_uncork(writer)  # no error


def corked(sock: socket.socket) -> bool:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) == 1


class Events:
    """A streamed body as the relays make it: pieces, and a `close` the server calls at the end."""

    def __init__(self, *pieces: bytes) -> None:
        self.pieces = iter(pieces)
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self.pieces

    def close(self) -> None:
        self.closed = True


def test_a_streamed_body_corks_from_its_first_piece_until_the_server_asks_for_the_next(tcp_pair):
    writer, reader = tcp_pair
    events = Events(EVENT, b"data: second\n\n")
    body = FirstWriteCorked(events, sock=writer)
    assert not corked(writer)  # nothing made yet: the head is not written before the first piece

    read = first_read(reader)
    first = next(body)
    assert corked(writer)
    writer.sendall(HEAD)  # as gunicorn writes them: the head, then the first piece
    writer.sendall(first)
    assert next(body) == b"data: second\n\n"
    assert not corked(writer)
    assert read() == HEAD + EVENT

    with pytest.raises(StopIteration):
        next(body)
    body.close()
    assert events.closed


def test_a_streamed_body_closed_after_its_first_piece_uncorks_and_closes_its_events(tcp_pair):
    writer, _ = tcp_pair
    events = Events(EVENT, b"never read")
    body = FirstWriteCorked(events, sock=writer)
    next(body)
    body.close()  # the server's, when the caller went away after the first write
    assert not corked(writer)
    assert events.closed
