"""`upstreams.sse.sse_events`: the events of a streamed upstream reply as they arrive, read over HTTP
(mocked with `responses`) in pieces split at any byte."""

from __future__ import annotations

import pytest

from tests.upstreams.conftest import OPENAI_BASE, trickled
from upstreams.errors import UpstreamError
from upstreams.sse import SSE_EVENT_MAX_BYTES, SSE_READ_BYTES, SSEEvent, sse_events
from upstreams.transport import upstream_request

pytestmark = pytest.mark.django_db

URL = f"{OPENAI_BASE}/stream"


def events_of(mocked, upstream, body: bytes, *, step: int = 7, comments: bool = False) -> list[SSEEvent]:
    mocked.post(URL, body=trickled(body, step), content_type="text/event-stream")
    with upstream_request(upstream=upstream, method="POST", url=URL, stream=True) as reply:
        return list(sse_events(reply, comments=comments))


@pytest.mark.parametrize("step", [1, 2, 3, 5, 64, 100_000])
@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"])
def test_it_yields_each_event_whole_whatever_the_line_ends_and_split(openai_upstream, mocked, step, line_end):
    body = (
        "\ufeff: a comment after a BOM\n\n"
        + line_end.join(["event: message_start", 'data: {"a": "猫 é 😀"}', "", ""])
        + line_end.join(['data: {"b":', "data: 2}", "", ""])
        + line_end.join(["data: [DONE]", "", ""])
    ).encode()
    assert events_of(mocked, openai_upstream, body, step=step) == [
        SSEEvent(event="message_start", data='{"a": "猫 é 😀"}'),
        SSEEvent(event="", data='{"b":\n2}'),
        SSEEvent(event="", data="[DONE]"),
    ]


def test_an_event_of_comments_only_yields_nothing(openai_upstream, mocked):
    body = b": ping\n: ping\n\ndata: x\n\n"
    assert events_of(mocked, openai_upstream, body) == [SSEEvent(event="", data="x")]


def test_an_event_name_without_data_is_forgotten_at_the_blank_line(openai_upstream, mocked):
    body = b"event: ping\n\ndata: x\n\n"
    assert events_of(mocked, openai_upstream, body) == [SSEEvent(event="", data="x")]


def test_it_keeps_the_value_after_one_space_and_ignores_other_fields(openai_upstream, mocked):
    body = b"id: 7\nretry: 10\nevent:named\ndata:  two spaces\ndata\n\n"
    assert events_of(mocked, openai_upstream, body) == [SSEEvent(event="named", data=" two spaces\n")]


def test_an_event_the_stream_ends_inside_is_not_delivered(openai_upstream, mocked):
    body = b'event: a\ndata: {"done": true}\n\nevent: b\ndata: {"cut'
    assert events_of(mocked, openai_upstream, body) == [SSEEvent(event="a", data='{"done": true}')]


def test_an_event_ended_by_a_final_lone_cr_is_delivered(openai_upstream, mocked):
    assert events_of(mocked, openai_upstream, b"data: x\r\r", step=1) == [SSEEvent(event="", data="x")]


def test_invalid_utf8_is_replaced_not_raised(openai_upstream, mocked):
    assert events_of(mocked, openai_upstream, b"data: \xff\xfe\n\n") == [
        SSEEvent(event="", data="\ufffd\ufffd")
    ]


def test_long_lines_in_small_pieces_are_read_in_linear_time(openai_upstream, mocked):
    line = "x" * 2_000_000
    body = f"data: {line}\n\n".encode() * 3
    events = events_of(mocked, openai_upstream, body, step=1000)
    assert [len(event.data) for event in events] == [len(line)] * 3


def test_events_that_arrived_in_one_read_say_that_more_follows_but_the_last(openai_upstream, mocked):
    body = b"data: 1\n\ndata: 2\n\ndata: 3\n\n"
    events = events_of(mocked, openai_upstream, body, step=len(body))

    assert [(event.data, event.more) for event in events] == [("1", True), ("2", True), ("3", False)]
    assert [event.raw for event in events] == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]


def test_raw_holds_an_events_own_lines_with_crlf_made_lf_but_no_comment_only_block(openai_upstream, mocked):
    body = b": ping\r\n\r\nid: 7\r\n: note\r\ndata: x\r\n\r\n"
    events = events_of(mocked, openai_upstream, body, step=3)

    assert [event.raw for event in events] == [b"id: 7\n: note\ndata: x\n\n"]


@pytest.mark.parametrize("step", [1, 3, 100_000])
def test_asked_for_comments_it_yields_each_block_of_comments_alone(openai_upstream, mocked, step):
    body = b": ping\n\nevent: named\n\nid: 7\n: note\ndata: x\n\n:a\r\n: b\r\n\r\ndata: y\n\n"
    events = events_of(mocked, openai_upstream, body, step=step, comments=True)

    assert [(event.comment, event.event, event.data, event.raw) for event in events] == [
        (True, "", "", b": ping\n\n"),
        (False, "", "x", b"id: 7\n: note\ndata: x\n\n"),  # a comment inside an event is part of it
        (True, "", "", b":a\n: b\n\n"),
        (False, "", "y", b"data: y\n\n"),
    ]  # the block of an `event:` line alone is still no event


SKIM_BODY = b"data: 1\n\ndata: 2\r\n\r\nevent: e\ndata: 3\n\n: ping\n\ndata: 4\n\ndata: 5"


def skim_read(mocked, upstream, body: bytes, *, step: int, skim) -> list[SSEEvent]:
    mocked.post(URL, body=trickled(body, step), content_type="text/event-stream")
    with upstream_request(upstream=upstream, method="POST", url=URL, stream=True) as reply:
        return list(sse_events(reply, comments=True, skim=skim))


@pytest.mark.parametrize("step", [1, 4, 9, 20, 100_000])
def test_a_skim_is_asked_the_whole_events_each_read_completes_and_takes_them_unparsed(
    openai_upstream, mocked, step
):
    asked: list[bytes] = []

    def skim(whole: bytes) -> bool:
        asked.append(whole)
        return b"3" not in whole

    events = skim_read(mocked, openai_upstream, SKIM_BODY, step=step, skim=skim)

    whole_events = SKIM_BODY.replace(b"\r\n", b"\n").rsplit(b"\n\n", 1)[0] + b"\n\n"  # not the cut "5"
    assert b"".join(event.raw for event in events) == whole_events  # every byte once, in order
    assert all(whole.endswith(b"\n\n") and b"5" not in whole for whole in asked)
    for event in events:
        assert event.skimmed == (event.raw in asked and b"3" not in event.raw)
        if event.skimmed:
            assert (event.event, event.data, event.more, event.comment) == ("", "", False, False)
    refused = [(event.event, event.data) for event in events if not event.skimmed and not event.comment]
    assert ("e", "3") in refused  # a run the skim refused comes as its events, parsed
    if step == 100_000:  # one read: one run, refused
        assert asked == [whole_events] and not any(event.skimmed for event in events)


def test_without_a_skim_or_when_it_refuses_every_run_the_events_are_the_same(openai_upstream, mocked):
    plain = skim_read(mocked, openai_upstream, SKIM_BODY, step=3, skim=None)
    refused = skim_read(mocked, openai_upstream, SKIM_BODY, step=3, skim=lambda whole: False)

    assert refused == plain
    assert [(event.event, event.data, event.comment) for event in plain] == [
        ("", "1", False),
        ("", "2", False),
        ("e", "3", False),
        ("", "", True),
        ("", "4", False),
    ]


def test_an_event_that_does_not_end_within_the_bound_is_the_upstreams_failure(openai_upstream, mocked):
    body = b"data: [1]\n\ndata: " + b"x" * SSE_EVENT_MAX_BYTES
    mocked.post(URL, body=body, content_type="text/event-stream")
    seen = []
    with (
        upstream_request(upstream=openai_upstream, method="POST", url=URL, stream=True) as reply,
        pytest.raises(UpstreamError) as failed,
    ):
        seen.extend(sse_events(reply))
    assert seen == [SSEEvent(event="", data="[1]")]
    assert failed.value.outcome_unknown and failed.value.status == 502  # it answered, wrongly
    assert str(SSE_EVENT_MAX_BYTES) in failed.value.message


def test_an_event_as_large_as_the_bound_is_delivered_whole(openai_upstream, mocked):
    data = b"x" * (SSE_EVENT_MAX_BYTES - len(b"data: \n\n"))
    assert events_of(mocked, openai_upstream, b"data: " + data + b"\n\n", step=SSE_READ_BYTES) == [
        SSEEvent(event="", data=data.decode())
    ]
