"""How a billed call's outcome becomes the HTTP answer, the same for every family: a stored response
(also what an Idempotency-Key replays), or an event stream relayed as it is produced. For a caller that
shows the answer instead of sending it on (the console), a stored response as data: CallAnswer."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse

from billing.idempotency import REPLAY_HEADER, StoredResponse
from core.corking import socket_cork, socket_uncork
from core.errors import InvalidRequest


def stored_response(stored: StoredResponse) -> HttpResponse:
    response = HttpResponse(stored.body, status=stored.status, content_type=stored.content_type)
    for name, value in stored.headers.items():
        response[name] = value
    return response


@dataclass(frozen=True)
class CallAnswer:
    """A call's stored JSON answer as data: its status, its body's fields, and whether it is the
    first answer replayed for an Idempotency-Key."""

    status: int
    body: dict[str, Any]
    replayed: bool

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error_message(self) -> str:
        """The message of an error answer in the gateway's shape; "" when it has none."""
        error = self.body.get("error")
        return (error.get("message") or "") if isinstance(error, dict) else ""


def call_answer(stored: StoredResponse) -> CallAnswer:
    """A stored response as a CallAnswer; a body that is not a JSON object reads as no fields."""
    try:
        body = json.loads(stored.body)
    except ValueError:
        body = None
    return CallAnswer(
        status=stored.status,
        body=body if isinstance(body, dict) else {},
        replayed=stored.headers.get(REPLAY_HEADER) == "true",
    )


def event_stream_response(events: Iterable[bytes], *, meta: Mapping[str, Any]) -> StreamingHttpResponse:
    """An event stream's answer. Under gunicorn (`meta` is the request's WSGI environ) its head leaves
    with the first event, in one segment (`FirstWriteCorked`)."""
    sock = meta.get("gunicorn.socket")
    body = FirstWriteCorked(events, sock=sock) if sock is not None else events
    streaming = StreamingHttpResponse(body, content_type="text/event-stream")
    streaming["Cache-Control"] = "no-cache"
    streaming["X-Accel-Buffering"] = "no"  # proxies must pass events on as they come
    return streaming


class FirstWriteCorked:
    """A streamed answer's body whose first piece leaves with the answer's head.

    gunicorn writes the head and the first piece in two sends; uncorked, each is a segment the caller
    wakes for alone. The caller's socket is corked (core/corking.py) once the first piece is made and
    uncorked when the server asks for the next, which WSGI lets it do only once the piece before is
    sent. `close` (the server's, through Django's response) uncorks too and closes `events`."""

    __slots__ = ("_corked", "_events", "_iterator", "_sock")

    def __init__(self, events: Iterable[bytes], *, sock: socket.socket | None) -> None:
        self._events = events
        self._iterator = iter(events)
        self._sock = sock  # until the first piece is made
        self._corked: socket.socket | None = None

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self._corked is not None:  # the head and the first piece are written: send them
            self._uncork()
        piece = next(self._iterator)
        if self._sock is not None:
            sock, self._sock = self._sock, None
            if socket_cork(sock):
                self._corked = sock
        return piece

    def close(self) -> None:
        if self._corked is not None:
            self._uncork()
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def _uncork(self) -> None:
        sock, self._corked = self._corked, None
        socket_uncork(sock)


def stream_idempotency_refused() -> InvalidRequest:
    """A stream cannot be replayed, so a retried stream would be a second call."""
    return InvalidRequest(
        "Idempotency-Key cannot be used with `stream: true`: an event stream cannot be replayed. "
        "Leave out one of them.",
        param="stream",
        code="idempotency_not_supported",
    )
