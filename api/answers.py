"""How a billed call's outcome becomes the HTTP answer, the same for every family: a stored response
(also what an Idempotency-Key replays), or an event stream relayed as it is produced."""

from __future__ import annotations

from collections.abc import Iterable

from django.http import HttpResponse, StreamingHttpResponse

from billing.idempotency import StoredResponse
from core.errors import InvalidRequest


def stored_response(stored: StoredResponse) -> HttpResponse:
    response = HttpResponse(stored.body, status=stored.status, content_type=stored.content_type)
    for name, value in stored.headers.items():
        response[name] = value
    return response


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
