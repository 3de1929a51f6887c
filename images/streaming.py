"""Streamed partial images (`stream: true`): relay the upstream's server-sent events as they arrive.

The reservation is taken before the response starts, so refusals (limits, balance, caps) are plain
JSON errors with their status. Upstreams are tried with the usual failover until one sends its first
event; after that the stream is never retried. The call is charged when every requested image's
completed event has arrived from the upstream; a stream that fails before that is not charged and
ends with an `error` event. If the client goes away mid-stream, the gateway still reads the upstream
to its end (the provider makes, and bills, the image anyway) and charges only a completed call.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from api.metering import MeteredCall
from api.stream_relay import StreamSettlement, stream_settled
from api.upstream_call import upstream_attempts_run
from api.upstream_errors import upstream_error_to_api_error
from api.usage import UsageScope
from core.errors import ApiError, UpstreamFailed, compatible_body
from images.access import ResolvedModel
from upstreams.providers import adapter_for
from upstreams.providers.base import IMAGES_STREAM, ImageRequest, StreamEvent, UpstreamError
from upstreams.routing import upstreams_for_model
from upstreams.snapshots import UpstreamSnapshot

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
    closed when the stream ends, however it ends (api/stream_relay.py)."""
    relay = _ImageRelay(
        settlement=StreamSettlement(owned=owned, meter=meter),
        usage=usage,
        resolved=resolved,
        upstream_request=upstream_request,
    )
    return stream_settled(
        relay.body(),
        settlement=relay.settlement,
        request_id=usage.request_id,
        caller_gone=relay.caller_gone,
        converted=relay.converted,
        error_event=relay.error_event,
    )


class _ImageRelay:
    """One streamed image call: its upstream's events, and how many images they have completed."""

    def __init__(
        self,
        *,
        settlement: StreamSettlement,
        usage: UsageScope,
        resolved: ResolvedModel,
        upstream_request: ImageRequest,
    ) -> None:
        self.settlement = settlement
        self.usage = usage
        self.resolved = resolved
        self.upstream_request = upstream_request
        self.events: Iterator[StreamEvent] | None = None
        self.upstream: UpstreamSnapshot | None = None
        self.completed = 0

    def body(self) -> Iterator[bytes]:
        first, self.events, self.upstream = _open_stream(
            usage=self.usage, resolved=self.resolved, upstream_request=self.upstream_request
        )
        # itertools.chain, not a generator: closing this body (the caller went away) must not close
        # the upstream's events, which `caller_gone` reads on.
        for event in itertools.chain((first,), self.events):
            self.completed += event.final
            if event.final and self.completed == self.upstream_request.n:
                # Charged when the last completed event has arrived from the upstream, before the
                # client sees the stream's last event.
                self.settlement.charge()
            yield sse(event.type, event.data)
        if self.completed < self.upstream_request.n:
            raise UpstreamError(
                "the upstream's stream ended before every image was completed",
                status=502,
                retryable=False,
                outcome_unknown=True,
            )

    def caller_gone(self) -> None:
        """The client went away: finish reading so that a completed image is charged as it was made."""
        wanted = self.upstream_request.n
        if self.events is not None and self.completed < wanted:
            self.completed += _drain(self.events)
            if self.completed >= wanted:
                self.settlement.charge()
        self.settlement.left(complete=self.completed >= wanted)

    def converted(self, error: UpstreamError) -> ApiError:
        return _converted(error, self.upstream)

    def error_event(self, error: ApiError) -> bytes:
        return sse("error", {"type": "error", **compatible_body(error, request_id=self.usage.request_id)})


def _converted(error: UpstreamError, upstream: UpstreamSnapshot | None) -> ApiError:
    if upstream is None:
        return UpstreamFailed("The model's provider failed.", code="upstream_error")
    return upstream_error_to_api_error(error=error, upstream=upstream)


def _open_stream(
    *, usage: UsageScope, resolved: ResolvedModel, upstream_request: ImageRequest
) -> tuple[StreamEvent, Iterator[StreamEvent], UpstreamSnapshot]:
    """Fail over between upstreams until one has sent its first event."""

    def attempt(upstream: UpstreamSnapshot, deadline: float) -> tuple[StreamEvent, Iterator[StreamEvent]]:
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


def _drain(events: Iterator[StreamEvent]) -> int:
    completed = 0
    try:
        for event in events:
            completed += event.final
    except UpstreamError:
        logger.warning("upstream stream failed after the client had gone away")
    return completed
