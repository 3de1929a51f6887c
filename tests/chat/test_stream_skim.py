"""A stream tracker's `skim`: runs of whole events it says hold nothing to follow are relayed
unparsed, so its answer must never differ from feeding those events one by one.

Every run of one to four consecutive events of each family's stream, as upstreams.text_shapes writes
it (the wire format the official SDKs parse), is checked both ways: where `skim` says yes, feeding
the run's events returns True for each and changes nothing the relay reads (usage, end, error, the
next sequence number); the plain deltas are skimmed, and every event the tracker follows is not.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from chat.families import ChatCompletionsTracker, MessagesTracker, ResponsesTracker, StreamTracker
from upstreams import text_shapes
from upstreams.sse import SSEEvent

ANSWER = text_shapes.Answer(
    tag="skim0001", created=1, model="m", text="tok ken tok ken ", truncated=False, input_tokens=12,
    output_tokens=4, cached_tokens=2,
)  # fmt: skip
DELTAS = ["tok ", "ken ", "tok ", "ken "]


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def wire(name: str, data: str) -> SSEEvent:
    raw = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
    return SSEEvent(event=name, data=data, raw=raw.encode())


def chat_events(*, finish_reason: str = "stop") -> list[SSEEvent]:
    completion = text_shapes.chat_completion(ANSWER)
    completion["choices"][0]["finish_reason"] = finish_reason
    chunks = text_shapes.chat_chunks(completion=completion, deltas=DELTAS, include_usage=True)
    return [*(wire("", compact(chunk)) for chunk in chunks), wire("", "[DONE]")]


def responses_events() -> list[SSEEvent]:
    response = text_shapes.response_object(ANSWER)
    return [
        wire(e["type"], compact(e)) for e in text_shapes.response_events(response=response, deltas=DELTAS)
    ]


def messages_events() -> list[SSEEvent]:
    message = text_shapes.message_object(ANSWER)
    events = text_shapes.message_events(message=message, deltas=DELTAS, ping=True)
    return [wire(e["type"], compact(e)) for e in events]


def noted(tracker: StreamTracker) -> tuple[Any, ...]:
    """What a tracker has noted of the stream: its usage, its end, an error, a finish reason."""
    return (tracker.tokens, tracker.complete, tracker.error, vars(tracker).get("finished"))


def state(tracker: StreamTracker) -> tuple[Any, ...]:
    """All the relay reads of a tracker: what it noted and the sequence number of an event it adds."""
    return (*noted(tracker), tracker.next_sequence)


STREAMS = {
    "chat": (ChatCompletionsTracker, chat_events),
    "responses": (ResponsesTracker, responses_events),
    "messages": (MessagesTracker, messages_events),
}


def runs_checked(tracker_class: type[StreamTracker], events: list[SSEEvent]) -> list[tuple[int, int, bool]]:
    """(start, length, skimmed) of every run of 1 to 4 events, each checked against feeding it."""
    checked = []
    for start in range(len(events)):
        for length in range(1, 5):
            run = events[start : start + length]
            if len(run) < length:
                break
            tracker = tracker_class(usage_asked=False)
            for event in events[:start]:
                tracker.feed(event)
            fed = copy.deepcopy(tracker)
            skimmed = tracker.skim(b"".join(event.raw for event in run))
            if skimmed:
                assert all(fed.feed(event) for event in run), (start, length)
                assert state(fed) == state(tracker), (start, length)
            checked.append((start, length, skimmed))
    return checked


def is_delta(event: SSEEvent) -> bool:
    return (
        event.event in ("response.output_text.delta", "content_block_delta")
        or '"delta":{"content":' in event.data
    )


@pytest.mark.parametrize("family", STREAMS)
def test_a_skimmed_run_is_one_that_feeding_would_relay_whole_and_note_nothing_of(family):
    tracker_class, events_of = STREAMS[family]
    events = events_of()

    checked = runs_checked(tracker_class, events)

    tracker, followed = tracker_class(usage_asked=False), set()
    for index, event in enumerate(events):
        before = noted(tracker)
        if not tracker.feed(event) or noted(tracker) != before:
            followed.add(index)
    deltas = {index for index, event in enumerate(events) if is_delta(event)}
    assert followed and len(deltas) == len(DELTAS)
    for start, length, skimmed in checked:
        run = set(range(start, start + length))
        assert not (skimmed and run & followed), (start, length)  # what is followed is fed
        assert skimmed or not run <= deltas, (start, length)  # and runs of deltas are skimmed


def test_a_chat_run_with_a_finish_reason_usage_or_done_is_not_skimmed():
    tracker = ChatCompletionsTracker(usage_asked=True)
    delta = wire("", compact({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}))

    def skim(*data: str) -> bool:
        return tracker.skim(delta.raw + b"".join(wire("", d).raw for d in data))

    assert skim() is True
    assert skim(compact({"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]})) is False
    assert skim('{"choices":[{"finish_reason":null},{"finish_reason":"length"}]}') is False
    assert skim('{"choices":[],"usage":{"prompt_tokens":1}}') is False
    assert skim("[DONE]") is False
    assert skim('{"error":{"message":"overloaded"}}') is False
    assert skim('{"choices":[{"delta":{"content":"a"},"finish_reason": null}]}') is False  # not compact: fed
    assert tracker.skim(b"data: a\ndata: b\n\n") is False  # two data lines: fed, joined
    assert tracker.skim(b": ping\n\n" + delta.raw) is False
    assert tracker.skim(b"id: 3\n" + delta.raw) is False


def test_a_named_event_run_is_skimmed_only_when_each_event_is_a_name_and_one_data_line():
    messages, responses = MessagesTracker(usage_asked=False), ResponsesTracker(usage_asked=False)
    delta = b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n'

    assert messages.skim(delta * 3) is True
    assert messages.skim(delta + b'event: message_delta\ndata: {"usage":{"output_tokens":9}}\n\n') is False
    assert messages.skim(delta + b"event: message_stop\ndata: {}\n\n") is False
    assert messages.skim(delta + b'event: error\ndata: {"type":"error"}\n\n') is False
    assert messages.skim(delta + b'data: {"type":"message_stop"}\n\n') is False  # unnamed: its type decides
    assert messages.skim(b"event: ping\n\n" + delta) is False  # a name without data is dropped, not relayed
    assert messages.skim(delta.replace(b"\ndata", b"\nid: 1\ndata")) is False
    assert responses.skim(b'event: response.output_text.delta\ndata: {"sequence_number":4}\n\n') is True
    assert responses.next_sequence == 5
    assert responses.skim(b'event: response.completed\ndata: {"response":{}}\n\n') is False
    assert responses.skim(b'event: response.failed\ndata: {"response":{}}\n\n') is False
