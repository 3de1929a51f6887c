"""How a billed call's outcome becomes the HTTP answer, the same for every family: a stored response
(also what an Idempotency-Key replays), or an event stream relayed as it is produced. For a caller that
shows the answer instead of sending it on (the console), a stored response as data: CallAnswer."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse

from core.errors import InvalidRequest

# The header that marks an Idempotency-Key's first answer given again (api/idempotency.py).
REPLAY_HEADER = "Idempotent-Replayed"


@dataclass
class StoredResponse:
    """A call's whole HTTP answer as data: what an Idempotency-Key keeps and replays, and what the
    non-streamed families answer (`stored_response`)."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)


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


def event_stream_response(events: Iterable[bytes]) -> StreamingHttpResponse:
    """An event stream's answer, relayed as the events come."""
    streaming = StreamingHttpResponse(events, content_type="text/event-stream")
    streaming["Cache-Control"] = "no-cache"
    streaming["X-Accel-Buffering"] = "no"  # proxies must pass events on as they come
    return streaming


def stream_idempotency_refused() -> InvalidRequest:
    """A stream cannot be replayed, so a retried stream would be a second call."""
    return InvalidRequest(
        "Idempotency-Key cannot be used with `stream: true`: an event stream cannot be replayed. "
        "Leave out one of them.",
        param="stream",
        code="idempotency_not_supported",
    )
