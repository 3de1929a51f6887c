"""Writes that leave together: TCP_CORK around a message written in parts.

gunicorn writes an answer's head and its first body bytes in two sends, and urllib3 a request's head
and its body; over TCP_NODELAY each send is a segment of its own, and the reader wakes for the head
alone, parses it, then wakes again for the rest. Corked, the parts wait in the kernel until the
uncork and leave as one segment, read in one wake-up: the caller's first event (and the upstream's
request) arrive whole. Linux only (TCP_CORK); elsewhere, and on a socket that is not TCP (a UNIX
socket behind a proxy), nothing is corked. The kernel sends corked bytes after 200 ms in any case,
so a cork left on by a failure delays, never loses, what was written.
"""

from __future__ import annotations

import contextlib
import socket

_CORK = getattr(socket, "TCP_CORK", None)


def socket_cork(sock: socket.socket | None) -> bool:
    """Hold what is written to `sock` until `socket_uncork`; False when it cannot be (nothing held)."""
    if _CORK is None or sock is None:
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, _CORK, 1)
    except OSError:  # not TCP, or already closed
        return False
    return True


def socket_uncork(sock: socket.socket) -> None:
    """Send what `socket_cork` held, now."""
    with contextlib.suppress(OSError):  # closed meanwhile: nothing left to send
        sock.setsockopt(socket.IPPROTO_TCP, _CORK, 0)
