"""Streamed text calls (`stream: true`): relay the upstream's server-sent events as they arrive.

- The hold is taken and the upstream's stream opened (with the usual retries and failover) before the
  answer starts, so every refusal and every failure before the first event is a plain JSON error
  with its status. After the first event, nothing is retried.
- Each event is passed on as soon as it is read, never held for a later one, in the bytes it came in
  (events that arrived in one read of the upstream go out in one write); the family's tracker
  (chat/families.py) reads the usage on the way and may hold back one event (a chat completion's
  usage-only chunk, which the caller did not ask for). A read whose events hold nothing the tracker
  follows (text deltas, mostly) goes on without being cut into events (the tracker's `skim`).
- The upstream's keep-alives (blocks of SSE comments, `: ping`) after the first event are passed on
  too, so the caller's connection (and any proxy's idle timeout on it) sees the stream alive while
  the model thinks. Those before the first event are not: the answer starts with the first event,
  so that until then a failing upstream can still fail over and a refusal keep its status.
- When the family's final event arrives, it is passed on and the exact cost of the reported usage
  captured before the answer's body ends, so whoever reads the account after the stream (the SDKs
  read a stream to its end) sees the final state, and the last event waits for no database. Nothing
  after the final event is read; the end of the upstream's body is awaited (to keep its connection)
  only once the server has closed the caller's answer (`StreamBody`).
- A stream the upstream cuts (or ends, or breaks with an error event) before its final event costs
  nothing: the hold is released and the caller gets an error event in the family's shape, which the
  SDKs raise. The usage record says why (`upstream_stream_cut`, `upstream_stream_error`).
- A caller who leaves mid-stream: the gateway reads the upstream on to its final event (at most the
  upstream's timeout more) and charges the usage reported, as the provider bills it anyway.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from api.answers import stream_client_gone, stream_owned_close
from api.errors import api_error_for
from api.metering import MeteredCall
from api.stream_loop import CALLER_GONE, TIMED_OUT, CallerSocket, stream_loop_relay
from api.upstream_call import upstream_attempts_run
from api.upstream_errors import upstream_error_to_api_error
from api.usage import UsageScope
from chat.access import ResolvedTextModel
from chat.answers import refusal_passthrough, tokens_charge
from chat.families import RESPONSES_FAMILY, Family, StreamTracker
from core.errors import ApiError, DomainError, InternalError, UpstreamFailed, compatible_body, native_body
from upstreams.errors import UpstreamError
from upstreams.providers import adapter_for
from upstreams.providers.base import SSEEvent, TextReply, TextRequest
from upstreams.snapshots import UpstreamSnapshot
from upstreams.sse import SSEDirect
from upstreams.transport import upstream_read_timed_out

logger = logging.getLogger("gateway.stream")

STREAM_CUT = "upstream_stream_cut"
STREAM_ERROR = "upstream_stream_error"
# Once the caller has the end of a complete stream's answer, how long the relay waits for the end of
# the upstream's body (which a provider sends with the final event or right after it) so that the
# connection goes back to the pool.
BODY_END_WAIT_SECONDS = 0.05


@dataclass
class StreamedTextCall:
    """A call whose answer is an event stream; `events` yields the encoded SSE bytes (a StreamBody:
    the server's close of the answer also ends the upstream's side)."""

    events: Iterator[bytes]


class StreamBody:
    """A streamed answer's body: iterates `events`. `close`, which the WSGI server calls through
    Django's response once it has sent the end of the answer, closes `events`, then runs what was
    left for after the caller's answer (`after`): the caller does not wait for it."""

    __slots__ = ("_after", "_events")

    def __init__(self, events: Iterator[bytes], *, after: ExitStack) -> None:
        self._events = events
        self._after = after

    def __iter__(self) -> Iterator[bytes]:
        return self._events

    def close(self) -> None:
        try:
            close = getattr(self._events, "close", None)
            if close is not None:
                close()
        finally:
            self._after.close()


def _reply_end(reply: TextReply) -> None:
    """After the caller's answer has ended: wait briefly for the end of the upstream's body (a
    provider sends it with the final event or right after it), so that `close` gives the connection
    back to the pool instead of dropping it."""
    try:
        reply.end_await(BODY_END_WAIT_SECONDS)
    finally:
        reply.close()


@dataclass
class OpenedStream:
    reply: TextReply
    first: SSEEvent
    upstream: UpstreamSnapshot


def stream_open(
    *, usage: UsageScope, resolved: ResolvedTextModel, request: TextRequest, family: Family
) -> OpenedStream:
    """Fail over between upstreams until one has sent its first event. An upstream's 4xx about the
    request is the caller's error, with the upstream's status and shape."""

    def attempt(upstream: UpstreamSnapshot, deadline: float) -> tuple[TextReply, SSEEvent | None]:
        reply = adapter_for(upstream, deadline=None).call(request.operation, request)
        if not 200 <= reply.status < 300 or reply.events is None:
            return reply, None
        try:
            first = next(event for event in reply.events if not event.comment)
        except StopIteration:
            reply.close()
            raise UpstreamError("the upstream's stream was empty", status=502, retryable=True) from None
        except BaseException:
            reply.close()
            raise
        return reply, first

    (reply, first), upstream = upstream_attempts_run(
        usage=usage,
        upstreams=resolved.upstreams,
        attempt=attempt,
        request_id=request.request_id,
    )
    if first is None:
        reply.close()
        if 200 <= reply.status < 300:
            raise UpstreamFailed("The model's provider did not answer with an event stream.")
        raise refusal_passthrough(reply=reply, upstream=upstream)
    return OpenedStream(reply=reply, first=first, upstream=upstream)


def sse_encode(event: SSEEvent) -> bytes:
    """One event as it goes to the caller: its name, then its data, one `data:` line per line."""
    lines = [f"event: {event.event}"] if event.event else []
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def error_event(*, family: Family, error: ApiError, request_id: str, sequence_number: int = 0) -> bytes:
    """The family's error event, which its SDK raises: a chat chunk `{"error": {...}}`; a Responses
    `error` event (which carries the same `error` object); Anthropic's `event: error`."""
    if family.shape == "native":
        data: dict[str, Any] = native_body(error, request_id=request_id)
        name = "error"
    elif family is RESPONSES_FAMILY:
        body = compatible_body(error, request_id=request_id)
        data = {
            "type": "error",
            "code": error.code,
            "message": body["error"]["message"],
            "param": None,
            "sequence_number": sequence_number,
            **body,
        }
        name = "error"
    else:
        data, name = compatible_body(error, request_id=request_id), ""
    return sse_encode(SSEEvent(event=name, data=json.dumps(data, separators=(",", ":"))))


def text_stream_relay(
    *,
    owned: ExitStack,
    usage: UsageScope,
    meter: MeteredCall,
    family: Family,
    resolved: ResolvedTextModel,
    opened: OpenedStream,
    usage_asked: bool,
    after: ExitStack,
    caller: CallerSocket | None = None,
) -> Iterator[bytes]:
    """The response body of a streamed text call. `owned` holds the usage scope and the hold and is
    closed when the stream ends, however it ends. A complete stream leaves its upstream reply to
    `after`, which the answer's StreamBody closes once the caller has the end of the answer. With
    `caller` (gunicorn's gevent worker), the events after the first read go through the worker's
    stream loop (api/stream_loop.py), straight to the caller's connection, until the final event."""
    assert family.tracker is not None
    tracker = family.tracker(usage_asked=usage_asked)
    reply = opened.reply
    reply.skim = tracker.skim  # runs of events with nothing to follow go on unparsed
    timeout = float(opened.upstream.timeout_seconds)
    finished = False

    def finish(failure: BaseException | None) -> None:
        nonlocal finished
        if finished:
            return
        finished = True
        if failure is None and tracker.complete:
            after.callback(_reply_end, reply)  # once the caller has the end of the answer
        else:
            reply.close()
        stream_owned_close(owned, failure)

    def settle() -> None:
        meter.capture(amount=tokens_charge(usage=usage, resolved=resolved, tokens=tracker.tokens))
        finish(None)

    def caller_gone() -> None:
        """The caller went away: read on to the final event, whose usage the provider bills anyway."""
        if not tracker.complete and tracker.error is None:
            _drain(reply=reply, tracker=tracker, timeout=timeout)
        if tracker.complete and tracker.error is None and not meter.resolved:
            settle()
        finish(None if tracker.complete else stream_client_gone())

    batch: list[bytes] = []  # events read together, sent together
    carried: list[SSEEvent] = []  # read by the loop after the final event, to relay after the capture

    def take(event: SSEEvent) -> bool:
        """Track and batch one event; True when the relay must stop at it: the final event with the
        charge still to make, or an error the upstream reported (relayed as the gateway's own)."""
        if event.comment or event.skimmed:  # a keep-alive, or events with nothing to track
            batch.append(event.raw)
            return False
        relayed = tracker.feed(event)
        if tracker.error is not None:
            return True
        if relayed:
            batch.append(event.raw or sse_encode(event))
        return tracker.complete and not meter.resolved

    def step(direct: SSEDirect) -> tuple[bytes, bool] | None:
        """One read for the stream loop, which runs it between greenlets: the bytes to send, and
        whether the stream leaves the loop. Only the stream's own objects are touched here (its
        greenlet waits meanwhile), and nothing here may wait on gevent."""
        nonlocal batch, carried
        events = direct.read()
        if events is None:
            return None
        for index, event in enumerate(events):
            if take(event):
                carried = events[index + 1 :]
                if tracker.error is not None:
                    return b"", True  # the events before it go out with the error event
                break
        else:
            if not direct.ended:
                out = batch[0] if len(batch) == 1 else b"".join(batch)
                batch = []
                return out, False
        out = b"".join(batch)
        batch = []
        return out, True

    # itertools.chain, not a generator: leaving the loop below (the caller went away, or the stream
    # loop takes over) must not close the upstream's events, which are read on afterwards.
    events: Iterator[SSEEvent] = itertools.chain((opened.first,), reply.events or ())
    try:
        while True:
            for event in events:
                final = take(event)
                if tracker.error is not None:
                    raise _stream_error(tracker.error, upstream=opened.upstream)
                if batch and (final or not event.more):
                    yield batch[0] if len(batch) == 1 else b"".join(batch)
                    batch = []
                if final:
                    settle()  # the final event is on its way; the answer ends once the charge is made
                    break
                if caller is not None and not event.more:
                    break  # between two reads: the stream loop may take over
            else:
                break  # the upstream's body has ended
            if meter.resolved:
                break  # charged at the final event: what may follow it is not read (`finish`)
            direct = reply.direct()
            if direct is None:
                caller = None
                continue
            outcome = stream_loop_relay(
                upstream_fd=direct.fd, caller=caller, step=functools.partial(step, direct), timeout=timeout
            )
            caller = None  # back through gunicorn: the capture, what follows the final event, the end
            if outcome == CALLER_GONE:
                caller_gone()
                return
            if outcome == TIMED_OUT:
                raise upstream_read_timed_out()
            if tracker.error is not None:
                raise _stream_error(tracker.error, upstream=opened.upstream)
            if tracker.complete and not meter.resolved:
                settle()
            # What came after the final event in its read goes on; nothing more is read after it.
            events = iter(carried) if tracker.complete else itertools.chain(carried, events)
        if batch:
            yield b"".join(batch)
            batch = []
        if not tracker.complete:
            tracker.ended()
        if not tracker.complete:
            raise UpstreamFailed(
                "The model's provider ended the stream before its final event; nothing was charged.",
                code=STREAM_CUT,
            )
        if not meter.resolved:
            settle()
    except GeneratorExit:
        caller_gone()
        raise
    except (ApiError, DomainError, UpstreamError) as exc:
        meter.release()
        error = _converted(exc, opened.upstream) if isinstance(exc, UpstreamError) else api_error_for(exc)
        finish(error)
        yield b"".join(batch) + error_event(
            family=family,
            error=error,
            request_id=usage.request_id,
            sequence_number=tracker.next_sequence,
        )
    except Exception as exc:
        meter.release()
        logger.exception("stream of request %s failed", usage.request_id)
        finish(exc)
        internal = InternalError("The stream failed inside the gateway; it has been logged.")
        yield b"".join(batch) + error_event(
            family=family,
            error=internal,
            request_id=usage.request_id,
            sequence_number=tracker.next_sequence,
        )
    finally:
        finish(None)  # no-op unless a path above did not settle


def _drain(*, reply: TextReply, tracker: StreamTracker, timeout: float) -> None:
    """Read the upstream's events on, without relaying them, to the final one (at most `timeout`)."""
    deadline = time.monotonic() + timeout
    try:
        for event in reply.events or iter(()):
            if event.comment or event.skimmed:
                continue
            tracker.feed(event)
            if tracker.complete or tracker.error is not None or time.monotonic() > deadline:
                return
        tracker.ended()
    except UpstreamError:
        logger.warning("upstream stream failed after the client had gone away")


def _stream_error(payload: Any, *, upstream: UpstreamSnapshot) -> ApiError:
    """The upstream's error event mid-stream, as the caller's error (its message scrubbed)."""
    converted = upstream_error_to_api_error(
        error=UpstreamError(
            "upstream reported an error mid-stream", status=502, retryable=False, body=payload, sent=True
        ),
        upstream=upstream,
    )
    return UpstreamFailed(
        f"The model's provider failed mid-stream; nothing was charged. {converted.message}".strip(),
        code=STREAM_ERROR,
    )


def _converted(error: UpstreamError, upstream: UpstreamSnapshot) -> ApiError:
    if error.outcome_unknown or error.status in (None, 502):
        return UpstreamFailed(
            "The connection to the model's provider broke mid-stream; nothing was charged.",
            code=STREAM_CUT,
        )
    return upstream_error_to_api_error(error=error, upstream=upstream)
