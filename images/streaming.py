"""Streamed partial images (`stream: true`): relay the upstream's server-sent events as they arrive.

The reservation is taken before the response starts, so refusals (limits, balance, caps) are plain
JSON errors with their status. Upstreams are tried with the usual failover until one sends its first
event; after that the stream is never retried. The call is charged when every requested image's
completed event has arrived from the upstream; a stream that fails before that is not charged and
ends with an `error` event. If the client goes away mid-stream, the gateway still reads the upstream
to its end (the provider makes, and bills, the image anyway) and charges only a completed call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from api.answers import stream_client_gone, stream_owned_close
from api.errors import api_error_for
from api.metering import MeteredCall
from api.upstream_call import upstream_attempts_run
from api.upstream_errors import upstream_error_to_api_error
from api.usage import UsageScope
from core.errors import ApiError, DomainError, InternalError, UpstreamFailed, compatible_body
from images.access import ResolvedModel
from upstreams.models import Upstream
from upstreams.providers import adapter_for
from upstreams.providers.base import IMAGES_STREAM, ImageRequest, StreamEvent, UpstreamError
from upstreams.routing import upstreams_for_model

logger = logging.getLogger("gateway.stream")


@dataclass
class StreamedCall:
    """A call whose answer is an event stream; `events` yields the encoded SSE bytes."""

    events: Iterator[bytes]


def sse(event_type: str, data: dict[str, Any]) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def stream_relay(
    *,
    owned: ExitStack,
    usage: UsageScope,
    meter: MeteredCall,
    resolved: ResolvedModel,
    upstream_request: ImageRequest,
) -> Iterator[bytes]:
    """The response body of a streamed call. `owned` holds the usage scope and the reservation and is
    closed when the stream ends, however it ends."""
    events: Iterator[StreamEvent] | None = None
    upstream: Upstream | None = None
    completed = 0
    finished = False

    def finish(failure: BaseException | None) -> None:
        # Settle the money and write the usage record before the client sees the stream's last
        # event, so whoever reads the account after the stream sees the final state.
        nonlocal finished
        if finished:
            return
        finished = True
        stream_owned_close(owned, failure)

    try:
        first, events, upstream = _open_stream(
            usage=usage, resolved=resolved, upstream_request=upstream_request
        )
        for event in _chain(first, events):
            completed += event.final
            if event.final and completed == upstream_request.n:
                # Charged when the last completed event has arrived from the upstream.
                meter.capture()
                finish(None)
            yield sse(event.type, event.data)
        if completed < upstream_request.n:
            raise UpstreamError(
                "the upstream's stream ended before every image was completed",
                status=502,
                retryable=False,
                outcome_unknown=True,
            )
    except GeneratorExit:
        # The client went away: finish reading so that a completed image is charged as it was made.
        if events is not None and completed < upstream_request.n:
            completed += _drain(events)
            if completed >= upstream_request.n:
                meter.capture()
        finish(None if completed >= upstream_request.n else stream_client_gone())
        raise
    except (ApiError, DomainError, UpstreamError) as exc:
        meter.release()
        error = _converted(exc, upstream)
        finish(error)
        yield sse("error", {"type": "error", **compatible_body(error, request_id=usage.request_id)})
    except Exception as exc:
        meter.release()
        logger.exception("stream of request %s failed", usage.request_id)
        finish(exc)
        internal = InternalError("The stream failed inside the gateway; it has been logged.")
        yield sse("error", {"type": "error", **compatible_body(internal, request_id=usage.request_id)})
    finally:
        finish(None)  # no-op unless a path above did not settle (e.g. a failure inside finish)


def _converted(error: ApiError | DomainError | UpstreamError, upstream: Upstream | None) -> ApiError:
    if not isinstance(error, UpstreamError):
        return api_error_for(error)
    if upstream is None:
        return UpstreamFailed("The model's provider failed.", code="upstream_error")
    return upstream_error_to_api_error(error=error, upstream=upstream)


def _open_stream(
    *, usage: UsageScope, resolved: ResolvedModel, upstream_request: ImageRequest
) -> tuple[StreamEvent, Iterator[StreamEvent], Upstream]:
    """Fail over between upstreams until one has sent its first event."""

    def attempt(upstream: Upstream, deadline: float) -> tuple[StreamEvent, Iterator[StreamEvent]]:
        events = adapter_for(upstream, deadline=None).call(IMAGES_STREAM, upstream_request)
        try:
            first = next(events)
        except StopIteration:
            raise UpstreamError("the upstream's stream was empty", status=502, retryable=True) from None
        return first, events

    (first, events), upstream = upstream_attempts_run(
        usage=usage,
        upstreams=upstreams_for_model(
            model_label=resolved.image_model.model_label, model_pk=resolved.image_model.pk
        ),
        attempt=attempt,
        request_id=upstream_request.request_id,
    )
    return first, events, upstream


def _chain(first: StreamEvent, rest: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    yield first
    yield from rest


def _drain(events: Iterator[StreamEvent]) -> int:
    completed = 0
    try:
        for event in events:
            completed += event.final
    except UpstreamError:
        logger.warning("upstream stream failed after the client had gone away")
    return completed
