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
- A caller who leaves mid-stream (found when a write to its connection fails, or it takes nothing
  for the upstream's timeout): the upstream's connection is closed at once (the provider stops
  generating, and billing), and the caller is charged what the provider bills: the input (as the
  upstream reported it at the start, else the hold's input ceiling) and the output received until
  then, counted from the events (chat/output_count.py), never more than the hold.
- On an upstream that speaks another family, the call's translator turns each upstream event into
  the caller's events as it is read (never buffered); the upstream family's tracker follows the
  usage, the final event and the output received, and the translator closes the caller's stream in
  its family's grammar before the charge. Nothing is skimmed: every event goes through the translator.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from api.metering import MeteredCall
from api.stream_loop import CALLER_GONE, TIMED_OUT, CallerSocket, stream_loop_relay
from api.stream_relay import StreamSettlement, stream_settled
from api.upstream_call import upstream_attempts_run
from api.upstream_errors import upstream_error_to_api_error
from api.usage import UsageScope
from billing.usage import TokenCounts
from chat.access import ResolvedTextModel
from chat.answers import refusal_for_caller, tokens_charge
from chat.families import RESPONSES_FAMILY, Family, StreamTracker
from chat.output_count import output_tokens_counted
from chat.response_store import ResponseThread, response_keep
from chat.tokenizers import output_encoder
from chat.translation import Route
from core.errors import ApiError, UpstreamFailed, compatible_body, native_body
from translators import Translator
from upstreams.errors import UpstreamError
from upstreams.providers import adapter_for
from upstreams.providers.base import SSEEvent, TextReply
from upstreams.snapshots import UpstreamSnapshot
from upstreams.sse import SSEDirect
from upstreams.transport import upstream_read_timed_out

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
    *, usage: UsageScope, resolved: ResolvedTextModel, routes: dict[str, Route], family: Family
) -> OpenedStream:
    """Fail over between upstreams until one has sent its first event. An upstream's 4xx about the
    request is the caller's error, with the upstream's status and shape."""

    def attempt(upstream: UpstreamSnapshot, deadline: float) -> tuple[TextReply, SSEEvent | None]:
        request = routes[upstream.kind].request  # each kind its own body (a failover may cross kinds)
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
        request_id=usage.request_id,
        affinity=resolved.affinity,
    )
    if first is None:
        reply.close()
        if 200 <= reply.status < 300:
            raise UpstreamFailed("The model's provider did not answer with an event stream.")
        translator = routes[upstream.kind].translator
        raise refusal_for_caller(reply=reply, upstream=upstream, translator=translator, family=family)
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
    input_ceiling: int,
    after: ExitStack,
    caller: CallerSocket | None = None,
    upstream_family: Family | None = None,
    translator: Translator | None = None,
    thread: ResponseThread | None = None,
) -> Iterator[bytes]:
    """The response body of a streamed text call. `owned` holds the usage scope and the hold and is
    closed when the stream ends, however it ends (api/stream_relay.py). A complete stream leaves its
    upstream reply to `after`, which the answer's StreamBody closes once the caller has the end of the
    answer. With `caller` (gunicorn's gevent worker), the events after the first read go through the
    worker's stream loop (api/stream_loop.py), straight to the caller's connection, until the final
    event. `input_ceiling` (the hold's input tokens) is the input charged to a caller who leaves
    before the upstream has reported its input. `upstream_family` is the family the upstream speaks
    (the caller's when None), and `translator` turns a translated call's events into the caller's;
    a complete translated Responses answer is kept in its `thread` when given."""
    relay = _TextRelay(
        owned=owned,
        meter=meter,
        usage=usage,
        family=family,
        resolved=resolved,
        opened=opened,
        usage_asked=usage_asked,
        input_ceiling=input_ceiling,
        after=after,
        upstream_family=upstream_family or family,
        translator=translator,
        thread=thread,
    )
    return stream_settled(
        relay.body(caller),
        settlement=relay.settlement,
        request_id=usage.request_id,
        caller_gone=relay.caller_gone,
        converted=relay.converted,
        error_event=relay.error_event,
    )


class _TextRelay:
    """One streamed text call: its upstream reply, the family's tracker, and the events read together
    that go to the caller together."""

    __slots__ = (
        "batch",
        "carried",
        "family",
        "input_ceiling",
        "opened",
        "reply",
        "resolved",
        "settlement",
        "thread",
        "tracker",
        "translator",
        "usage",
    )

    def __init__(
        self,
        *,
        owned: ExitStack,
        meter: MeteredCall,
        usage: UsageScope,
        family: Family,
        resolved: ResolvedTextModel,
        opened: OpenedStream,
        usage_asked: bool,
        input_ceiling: int,
        after: ExitStack,
        upstream_family: Family,
        translator: Translator | None,
        thread: ResponseThread | None,
    ) -> None:
        assert upstream_family.tracker is not None
        # The upstream's events are tracked in its own family; a translated stream always asks its
        # upstream for the usage (the translator), whatever the caller asked.
        tracker: StreamTracker = upstream_family.tracker(usage_asked=usage_asked or translator is not None)
        # A function of the reply's own objects, not a method of this relay: the relay holds the
        # settlement, and a finished stream must leave no reference cycle for the collector.
        before_close = functools.partial(_reply_settle, reply=opened.reply, tracker=tracker, after=after)
        self.settlement = StreamSettlement(owned=owned, meter=meter, before_close=before_close)
        self.usage = usage
        self.family = family
        self.resolved = resolved
        self.opened = opened
        self.input_ceiling = input_ceiling
        self.tracker = tracker
        self.reply = opened.reply
        self.translator = translator
        self.thread = thread
        if translator is None:
            self.reply.skim = self.tracker.skim  # runs of events with nothing to follow go on unparsed
        self.batch: list[bytes] = []  # events read together, sent together
        self.carried: list[SSEEvent] = []  # read by the loop after the final event, relayed after the capture

    def body(self, caller: CallerSocket | None) -> Iterator[bytes]:
        """The relayed events, up to the final one (charged before the answer ends) or a failure."""
        tracker, reply, opened = self.tracker, self.reply, self.opened
        # itertools.chain, not a generator: leaving the loop below (the caller went away, or the stream
        # loop takes over) must not close the upstream's events, which are read on afterwards.
        events: Iterator[SSEEvent] = itertools.chain((opened.first,), reply.events or ())
        while True:
            for event in events:
                final = self.take(event)
                if tracker.error is not None:
                    raise _stream_error(tracker.error, upstream=opened.upstream)
                if self.batch and (final or not event.more):
                    yield self.batch[0] if len(self.batch) == 1 else b"".join(self.batch)
                    self.batch = []
                if final:
                    self.settle()  # the final event is on its way; the answer ends once the charge is made
                    break
                if caller is not None and not event.more:
                    break  # between two reads: the stream loop may take over
            else:
                break  # the upstream's body has ended
            if self.settlement.resolved:
                break  # charged at the final event: what may follow it is not read (`_reply_settle`)
            direct = reply.direct()
            if direct is None:
                caller = None
                continue
            outcome = stream_loop_relay(
                upstream_fd=direct.fd,
                caller=caller,
                step=functools.partial(self.step, direct),
                timeout=float(opened.upstream.timeout_seconds),
            )
            caller = None  # back through gunicorn: the capture, what follows the final event, the end
            if outcome == CALLER_GONE:
                self.caller_gone()
                return
            if outcome == TIMED_OUT:
                raise upstream_read_timed_out()
            if tracker.error is not None:
                raise _stream_error(tracker.error, upstream=opened.upstream)
            if tracker.complete and not self.settlement.resolved:
                self.settle()
            # What came after the final event in its read goes on; nothing more is read after it.
            events = iter(self.carried) if tracker.complete else itertools.chain(self.carried, events)
        if self.batch:
            yield b"".join(self.batch)
            self.batch = []
        if not tracker.complete:
            tracker.ended()
            if tracker.complete and self.translator is not None:
                yield self.translator.stream_end()  # the caller's stream ends in its family's grammar
        if not tracker.complete:
            raise UpstreamFailed(
                "The model's provider ended the stream before its final event; nothing was charged.",
                code=STREAM_CUT,
            )
        if not self.settlement.resolved:
            self.settle()

    def take(self, event: SSEEvent) -> bool:
        """Track and batch one event; True when the relay must stop at it: the final event with the
        charge still to make, or an error the upstream reported (relayed as the gateway's own)."""
        if event.comment:  # a keep-alive
            self.batch.append(event.raw)
            return False
        tracker = self.tracker
        raw = event.raw or sse_encode(event)  # an adapter that makes its events has no raw bytes
        tracker.received.take(raw)
        if event.skimmed:  # events with nothing to track
            self.batch.append(raw)
            return False
        relayed = tracker.feed(event)
        if tracker.error is not None:
            return True
        if self.translator is not None:
            translated = self.translator.stream_event(event.data)
            if tracker.complete:
                translated += self.translator.stream_end()
            if translated:
                self.batch.append(translated)
        elif relayed:
            self.batch.append(raw)
        return tracker.complete and not self.settlement.resolved

    def step(self, direct: SSEDirect) -> tuple[bytes, bool] | None:
        """One read for the stream loop, which runs it between greenlets: the bytes to send, and
        whether the stream leaves the loop. Only the stream's own objects are touched here (its
        greenlet waits meanwhile), and nothing here may wait on gevent."""
        events = direct.read()
        if events is None:
            return None
        for index, event in enumerate(events):
            if self.take(event):
                self.carried = events[index + 1 :]
                if self.tracker.error is not None:
                    return b"", True  # the events before it go out with the error event
                break
        else:
            if not direct.ended:
                batch = self.batch
                self.batch = []
                return batch[0] if len(batch) == 1 else b"".join(batch), False
        out = b"".join(self.batch)
        self.batch = []
        return out, True

    def settle(self) -> None:
        """Keep a translated Responses answer, charge the usage the upstream reported, and end the
        call."""
        if self.thread is not None and self.translator is not None:
            response_keep(thread=self.thread, answer=self.translator.responses_answer)
        tokens = self.tracker.tokens
        self.settlement.charge(tokens_charge(usage=self.usage, resolved=self.resolved, tokens=tokens))

    def caller_gone(self) -> None:
        """The caller went away: close the upstream's connection now, so that the provider stops
        generating, and charge what it bills until then (`_left_tokens`)."""
        tracker, settlement = self.tracker, self.settlement
        if tracker.complete:
            if tracker.error is None and not settlement.resolved:
                self.settle()
            settlement.left(complete=True)
            return
        self.reply.close()
        if tracker.error is None and not settlement.resolved:
            tokens = _left_tokens(
                tracker=tracker, opened=self.opened, resolved=self.resolved, input_ceiling=self.input_ceiling
            )
            settlement.meter.capture(
                amount=tokens_charge(usage=self.usage, resolved=self.resolved, tokens=tokens)
            )
        settlement.left(complete=False)

    def converted(self, error: UpstreamError) -> ApiError:
        return _converted(error, self.opened.upstream)

    def error_event(self, error: ApiError) -> bytes:
        """The failed stream's last bytes: the events read with the failure, then the error event."""
        return b"".join(self.batch) + error_event(
            family=self.family,
            error=error,
            request_id=self.usage.request_id,
            sequence_number=self.tracker.next_sequence,
        )


def _reply_settle(
    failure: BaseException | None, *, reply: TextReply, tracker: StreamTracker, after: ExitStack
) -> None:
    """When a streamed text call ends: a complete stream's reply waits for the end of the caller's
    answer (`_reply_end`); any other is closed now."""
    if failure is None and tracker.complete:
        after.callback(_reply_end, reply)
    else:
        reply.close()


def _left_tokens(
    *, tracker: StreamTracker, opened: OpenedStream, resolved: ResolvedTextModel, input_ceiling: int
) -> TokenCounts:
    """What a stream whose caller left before its final event used, as the provider bills it: the
    usage the upstream reported, if it reported its output; else its input as reported at the start
    (Anthropic's `message_start`) or, unreported, the hold's input ceiling, and the output received,
    counted with the model's tokenizer or bounded by its bytes (chat/tokenizers.py)."""
    reported = tracker.tokens
    if reported is not None and tracker.output_reported:
        return reported
    encode = output_encoder(
        upstream_kind=opened.upstream.kind, upstream_model=resolved.text_model.upstream_model_name
    )
    output = output_tokens_counted(tracker.received.text(), encode=encode)
    if reported is None:
        return TokenCounts(input=input_ceiling, output=output)
    return dataclasses.replace(reported, output=output)


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
