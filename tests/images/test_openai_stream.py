"""The `openai` adapter's event streams (`stream: true`), read as they arrive over HTTP (mocked with
`responses`, or a raw socket for a broken transfer): events split at any byte, every line end the
format allows, UTF-8 text, large partial images, and a transfer broken mid-way."""

from __future__ import annotations

import base64
import json

import pytest

from tests.fake_upstream import _png
from tests.images.conftest import OPENAI_BASE
from tests.upstreams.conftest import trickled
from upstreams.providers import adapter_for
from upstreams.providers.base import ImageRequest, UpstreamError

pytestmark = pytest.mark.django_db

GENERATIONS = f"{OPENAI_BASE}/images/generations"
PARTIAL, COMPLETED = "image_generation.partial_image", "image_generation.completed"
REQUEST = ImageRequest(
    operation="generate", upstream_model="gpt-image-1", prompt="p", options={"partial_images": 1}
)


def stream_answer(mocked, body: bytes, *, step: int) -> None:
    mocked.post(
        GENERATIONS,
        body=trickled(body, step),
        content_type="text/event-stream",
    )


def event(kind: str, data: dict, *, line_end: str = "\n") -> str:
    """One event as providers send it: UTF-8 text, not escaped to ASCII."""
    return f"event: {kind}{line_end}data: {json.dumps(data, ensure_ascii=False)}{line_end}{line_end}"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, 100_000])
def test_events_split_at_any_byte_arrive_whole_with_every_line_end(openai_upstream, mocked, step):
    partial = {"type": PARTIAL, "b64_json": "iVBORw0KGgo=", "partial_image_index": 0}
    completed = {"type": COMPLETED, "b64_json": "iVBORw0KGgo=", "revised_prompt": "猫 und é 😀"}
    body = (
        "\ufeff: a comment, then an event with CRLF line ends\r\n"
        + event(PARTIAL, partial, line_end="\r\n")
        + ": CR line ends\r"
        + event(PARTIAL, {**partial, "partial_image_index": 1}, line_end="\r")
        # one event's JSON over two data lines, which the format joins with a newline
        + f'event: {COMPLETED}\ndata: {{"type": "{COMPLETED}",\n'
        + f"data: {json.dumps(completed, ensure_ascii=False)[1:]}\n\n"
    ).encode()
    stream_answer(mocked, body, step=step)
    events = list(adapter_for(openai_upstream).stream(REQUEST))
    assert [(e.type, e.final) for e in events] == [(PARTIAL, False), (PARTIAL, False), (COMPLETED, True)]
    assert [e.data.get("partial_image_index") for e in events[:2]] == [0, 1]
    assert events[2].data == completed
    assert json.loads(mocked.calls[0].request.body)["stream"] is True


def test_a_large_partial_image_arrives_whole(openai_upstream, mocked):
    large = base64.b64encode(_png(pad_to=4_000_000)).decode()
    body = (
        event(PARTIAL, {"type": PARTIAL, "b64_json": large, "partial_image_index": 0})
        + event(COMPLETED, {"type": COMPLETED, "b64_json": large})
    ).encode()
    stream_answer(mocked, body, step=1000)
    events = list(adapter_for(openai_upstream).stream(REQUEST))
    assert [(e.type, e.data["b64_json"] == large) for e in events] == [(PARTIAL, True), (COMPLETED, True)]


def test_an_event_left_unfinished_at_the_end_is_not_delivered(openai_upstream, mocked):
    body = (
        event(PARTIAL, {"type": PARTIAL, "b64_json": "QQ=="}) + f"event: {COMPLETED}\ndata: {{}}"
    ).encode()
    stream_answer(mocked, body, step=5)
    assert [e.type for e in adapter_for(openai_upstream).stream(REQUEST)] == [PARTIAL]


def test_an_error_event_mid_stream_is_an_error_whose_outcome_is_unknown(openai_upstream, mocked):
    body = (
        event(PARTIAL, {"type": PARTIAL, "b64_json": "QQ=="})
        + event("error", {"type": "error", "error": {"message": "moderation"}})
    ).encode()
    stream_answer(mocked, body, step=10)
    events = adapter_for(openai_upstream).stream(REQUEST)
    assert next(events).type == PARTIAL
    with pytest.raises(UpstreamError) as info:
        next(events)
    assert (info.value.status, info.value.outcome_unknown) == (502, True)


def test_a_transfer_broken_mid_chunk_is_an_error_whose_outcome_is_unknown(raw_upstream):
    first = event(PARTIAL, {"type": PARTIAL, "b64_json": "QQ=="}).encode()
    upstream = raw_upstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(first):x}\r\n".encode()
        + first
        + b"\r\n400\r\nevent: image_generation.compl"  # a chunk of 1024 bytes that never completes
    )
    events = adapter_for(upstream).stream(REQUEST)
    assert next(events).type == PARTIAL
    with pytest.raises(UpstreamError) as info:
        next(events)
    assert (info.value.status, info.value.outcome_unknown) == (502, True)
