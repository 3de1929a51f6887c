"""Streamed text calls: events relayed as they come, usage read on the way, the exact cost charged
when the final event arrives; a cut stream costs nothing and ends with the family's error event."""

from __future__ import annotations

import gc
import json
import time
from collections import Counter
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.core.wsgi import get_wsgi_application
from django.test import RequestFactory

from billing.models import Hold, UsageRecord, Wallet
from billing.selectors import ledger_check
from tests.chat.conftest import ANTHROPIC_BASE, KEY_ENV, OPENAI_BASE, PROVIDER_KEY, sent_json, sse_body
from tests.circuit_counts import counted
from tests.factories import text_model_make, upstream_make
from tests.images.conftest import RawUpstream
from tests.upstreams.conftest import event_by_event
from upstreams import circuit

pytestmark = pytest.mark.django_db

CHAT_URL = f"{OPENAI_BASE}/chat/completions"
RESPONSES_URL = f"{OPENAI_BASE}/responses"
MESSAGES_URL = f"{ANTHROPIC_BASE}/messages"


def balance(account) -> Decimal:
    return Wallet.objects.get(account=account).balance


def stream(client, path, body, key):
    response = client.post(
        path,
        data=json.dumps({**body, "stream": True}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    return response


def events_of(response) -> list[tuple[str, str]]:
    """(event name, data) of each event the caller received."""
    text = b"".join(response.streaming_content).decode()
    events = []
    for block in text.strip().split("\n\n"):
        name, data = "", []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        events.append((name, "\n".join(data)))
    return events


def chunk(content=None, finish=None, usage=None, choices=True):
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "vendor-chat-1"}
    body["choices"] = (
        [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}]
        if choices
        else []
    )
    body["usage"] = usage
    return body


CHAT_USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
CHAT_COST = Decimal("0.00036")  # 100 x 2 + 20 x 8 per million


def chat_stream_body(*, done=True, usage=True):
    events = [("", chunk("Hel")), ("", chunk("lo")), ("", chunk(finish="stop"))]
    if usage:
        events.append(("", chunk(usage=CHAT_USAGE, choices=False)))
    if done:
        events.append(("", "[DONE]"))
    return sse_body(*events)


def test_a_chat_stream_asks_for_usage_and_hides_the_usage_chunk_from_a_caller_who_did_not(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(CHAT_URL, body=chat_stream_body(), content_type="text/event-stream")
    response = stream(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    events = events_of(response)
    assert sent_json(upstream.calls[0])["stream_options"] == {"include_usage": True}
    assert [data for _, data in events][-1] == "[DONE]"
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert all(c["choices"] for c in chunks)  # `chunk.choices[0]` works on every chunk
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Hello"
    assert balance(tara) == Decimal("1.00") - CHAT_COST
    record = UsageRecord.objects.get()
    assert (record.status, record.amount, record.input_tokens, record.output_tokens) == (
        200,
        CHAT_COST,
        100,
        20,
    )
    assert ledger_check() == []


def test_a_streams_due_call_counts_are_written_after_its_end_not_before_its_first_event(
    client, upstream, chat_model, openai_upstream, tara, tara_key, monkeypatch
):
    circuit.circuit_stats_flush()  # earlier tests' counts out of the way
    cache.clear()
    monkeypatch.setattr(circuit, "STATS_FLUSH_SECONDS", 0.0)  # the stream's count finds a write due
    first_minute = int(time.time() // 60)
    upstream.post(CHAT_URL, body=chat_stream_body(), content_type="text/event-stream")

    response = stream(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)
    first = next(iter(response.streaming_content))
    minutes = range(first_minute, int(time.time() // 60) + 1)
    assert counted(openai_upstream.pk, minutes) == (0, 0)  # the upstream answered; nothing written yet
    b"".join(response.streaming_content)  # the stream's end: the request finishes

    assert first.startswith(b"data: ")
    assert counted(openai_upstream.pk, minutes) == (1, 0)
    assert balance(tara) == Decimal("1.00") - CHAT_COST


def test_a_chat_stream_keeps_the_usage_chunk_for_a_caller_who_asked(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(CHAT_URL, body=chat_stream_body(), content_type="text/event-stream")
    body = {"model": "alpha-chat", "messages": [], "stream_options": {"include_usage": True}}
    events = events_of(stream(client, "/v1/chat/completions", body, tara_key))

    assert json.loads(events[-2][1])["usage"] == CHAT_USAGE
    assert balance(tara) == Decimal("1.00") - CHAT_COST


@pytest.mark.parametrize("per_read", [1, 3, 4])
def test_deltas_read_in_runs_go_out_as_they_came_and_the_usage_chunk_is_still_read_and_hidden(
    client, upstream, chat_model, tara, tara_key, per_read
):
    # Compact JSON, as OpenAI sends it: runs of plain deltas go out unparsed (the tracker's skim).
    def data(value):
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

    events = [("", chunk(content)) for content in ["H", "e", "l", "l", "o", "!"]]
    events += [("", chunk(finish="stop")), ("", chunk(usage=CHAT_USAGE, choices=False)), ("", "[DONE]")]
    body = sse_body(*((name, data(value)) for name, value in events))
    upstream.post(CHAT_URL, body=event_by_event(body, per_read), content_type="text/event-stream")
    response = stream(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    pieces = list(response.streaming_content)

    usage_chunk = f"data: {data(events[-2][1])}\n\n"
    assert b"".join(pieces) == body.replace(usage_chunk, "").encode()
    assert len(pieces) == -(-len(events) // per_read) - (per_read == 1)  # a write per read that relays
    assert balance(tara) == Decimal("1.00") - CHAT_COST
    record = UsageRecord.objects.get()
    assert (record.amount, record.input_tokens, record.output_tokens) == (CHAT_COST, 100, 20)
    assert ledger_check() == []


def test_keep_alive_comments_after_the_first_event_reach_the_caller_in_their_place(
    client, upstream, chat_model, tara, tara_key
):
    first, *rest = chat_stream_body().split("\n\n")[:-1]
    keep_alive = ": keep-alive\n\n"
    body = keep_alive + first + "\n\n" + keep_alive + "".join(f"{event}\n\n{keep_alive}" for event in rest)
    upstream.post(CHAT_URL, body=event_by_event(body), content_type="text/event-stream")
    response = stream(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    pieces = list(response.streaming_content)

    # Not the one before the first event (the answer starts with the first event), nor the one after
    # [DONE] (the answer ends with the charge). The usage-only chunk, which this caller did not ask
    # for, is not relayed; the keep-alive after it is.
    usage_chunk = next(event for event in rest if '"choices": []' in event) + "\n\n"
    expected = body.removeprefix(keep_alive).removesuffix(keep_alive).replace(usage_chunk, "").encode()
    assert b"".join(pieces) == expected
    assert pieces.count(keep_alive.encode()) == len(rest)  # each read on its own, as it came
    assert balance(tara) == Decimal("1.00") - CHAT_COST
    assert UsageRecord.objects.get().amount == CHAT_COST


def test_a_stream_of_keep_alives_alone_is_an_upstream_failure_that_costs_nothing(
    client, upstream, chat_model, tara, tara_key, settings
):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.0, "max_retries": 1}
    for _ in range(2):  # an empty stream is retried, as any failure before the first event
        upstream.post(CHAT_URL, body=": ping\n\n: ping\n\n", content_type="text/event-stream")
    response = stream(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    assert response.status_code == 502
    assert len(upstream.calls) == 2
    assert response.json()["error"]["type"] == "upstream_error"
    assert balance(tara) == Decimal("1.00")
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()


def test_a_chat_stream_cut_before_its_end_costs_nothing_and_ends_with_an_error_chunk(
    client, upstream, chat_model, tara, tara_key
):
    cut = sse_body(("", chunk("Hel")), ("", chunk("lo")))
    upstream.post(CHAT_URL, body=cut, content_type="text/event-stream")
    events = events_of(
        stream(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)
    )

    assert json.loads(events[0][1])["choices"][0]["delta"]["content"] == "Hel"
    error = json.loads(events[-1][1])["error"]
    assert error["code"] == "upstream_stream_cut"
    assert balance(tara) == Decimal("1.00")
    assert Wallet.objects.get(account=tara).held == 0
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code, record.amount) == (502, "upstream_stream_cut", 0)
    assert Hold.objects.get().status == "released"


def test_a_responses_stream_is_billed_from_response_completed(client, upstream, chat_model, tara, tara_key):
    completed = {
        "type": "response.completed",
        "sequence_number": 3,
        "response": {"id": "r1", "status": "completed", "usage": {"input_tokens": 10, "output_tokens": 5}},
    }
    upstream.post(
        RESPONSES_URL,
        body=sse_body(
            (
                "response.created",
                {"type": "response.created", "sequence_number": 0, "response": {"id": "r1"}},
            ),
            (
                "response.output_text.delta",
                {"type": "response.output_text.delta", "sequence_number": 1, "delta": "Hi"},
            ),
            ("response.completed", completed),
        ),
        content_type="text/event-stream",
    )
    events = events_of(stream(client, "/v1/responses", {"model": "alpha-chat", "input": "Hi"}, tara_key))

    assert [name for name, _ in events] == [
        "response.created",
        "response.output_text.delta",
        "response.completed",
    ]
    assert balance(tara) == Decimal("1.00") - Decimal("0.00006")  # 10 x 2 + 5 x 8


def messages_stream_body(*, stop=True):
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m1",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "vendor-claude-1",
                    "usage": {"input_tokens": 50, "cache_read_input_tokens": 100, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 40}},
        ),
    ]
    if stop:
        events.append(("message_stop", {"type": "message_stop"}))
    return sse_body(*events)


def test_a_messages_stream_is_billed_from_message_start_and_message_delta(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(MESSAGES_URL, body=messages_stream_body(), content_type="text/event-stream")
    events = events_of(stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key))

    assert events[-1][0] == "message_stop"
    # 50 x 3 + 100 x 0.30 + 40 x 15 per million
    assert balance(tara) == Decimal("1.00") - Decimal("0.00078")
    record = UsageRecord.objects.get()
    assert (record.input_tokens, record.cached_tokens, record.output_tokens) == (50, 100, 40)


def test_events_that_arrive_together_go_out_together_in_the_bytes_they_came_in(
    client, upstream, claude_model, tara, tara_key
):
    body = messages_stream_body().replace("event: ping", "id: 3\nevent: ping")  # all of it in one read
    upstream.post(MESSAGES_URL, body=body, content_type="text/event-stream")
    response = stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key)

    pieces = list(response.streaming_content)

    assert pieces == [body.encode()]
    assert balance(tara) == Decimal("1.00") - Decimal("0.00078")


@pytest.mark.django_db(transaction=True)  # the charge commits while the answer is still open
def test_the_final_event_goes_out_before_the_charge_and_the_answer_ends_after_it(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(MESSAGES_URL, body=messages_stream_body(), content_type="text/event-stream")
    response = stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key)
    pieces = iter(response.streaming_content)

    first = next(pieces)  # every event, the final one included, arrived in one read

    assert b"event: message_stop" in first
    assert balance(tara) == Decimal("1.00")  # the final event did not wait for the database
    assert list(pieces) == []  # the answer ends once the charge is made
    assert balance(tara) == Decimal("1.00") - Decimal("0.00078")


def test_events_read_apart_go_out_apart(client, upstream, claude_model, tara, tara_key):
    body = messages_stream_body()
    upstream.post(MESSAGES_URL, body=event_by_event(body), content_type="text/event-stream")
    response = stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key)

    pieces = list(response.streaming_content)

    assert len(pieces) == body.count("\n\n") and b"".join(pieces) == body.encode()


def test_an_error_event_mid_stream_costs_nothing_and_reaches_the_caller_in_anthropics_shape(
    client, upstream, claude_model, tara, tara_key
):
    body = messages_stream_body(stop=False).split("event: content_block_delta")[0] + sse_body(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    upstream.post(MESSAGES_URL, body=body, content_type="text/event-stream")
    events = events_of(stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key))

    name, data = events[-1]
    assert name == "error"
    assert json.loads(data)["type"] == "error"
    assert json.loads(data)["error"]["type"] == "api_error"
    assert balance(tara) == Decimal("1.00")
    assert UsageRecord.objects.get().error_code == "upstream_stream_error"


# A caller who leaves before the final event pays the input the upstream reported at the start (50 x
# ¥3 + 100 cache reads x ¥0.30 per million) and the output received until then, bounded by its UTF-8
# bytes for a model without a public tokenizer ("Hi": 2 x ¥15): ¥0.00021.
LEFT_AFTER_HI = Decimal("0.00021")


def assert_charged_for_leaving(account, amount: Decimal, *, output_tokens: int) -> None:
    record = UsageRecord.objects.get()
    assert (record.status, record.error_code) == (499, "client_closed_request")
    assert (record.amount, record.input_tokens, record.cached_tokens, record.output_tokens) == (
        amount,
        50,
        100,
        output_tokens,
    )
    hold = Hold.objects.get()
    assert (hold.status, hold.captured_amount) == (Hold.Status.CAPTURED, amount)
    assert balance(account) == Decimal("1.00") - amount
    assert ledger_check() == []


@pytest.mark.django_db(transaction=True)  # closing the response ends the request, and its connection
@pytest.mark.parametrize("keep_alive", [False, True])
def test_a_caller_who_leaves_mid_stream_pays_the_input_and_the_output_received_until_then(
    client, upstream, claude_model, tara, tara_key, keep_alive
):
    body = messages_stream_body()
    if keep_alive:  # the upstream's keep-alives are relayed and count for nothing
        body = body.replace("\n\n", "\n\n: keep-alive\n\n")
    upstream.post(MESSAGES_URL, body=event_by_event(body), content_type="text/event-stream")
    response = stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key)
    pieces = []
    for piece in response.streaming_content:  # events read together are relayed together
        pieces.append(piece)
        if b"content_block_delta" in piece:
            break  # the caller leaves after the first text delta
    response.close()

    assert pieces[0].startswith(b"event: message_start")
    assert (pieces[1] == b": keep-alive\n\n") is keep_alive
    assert_charged_for_leaving(tara, LEFT_AFTER_HI, output_tokens=2)


@pytest.mark.django_db(transaction=True)  # closing the response ends the request, and its connection
def test_a_caller_who_leaves_pays_for_the_output_of_runs_of_skimmed_events(
    client, upstream, claude_model, tara, tara_key
):
    body = messages_stream_body().replace(
        "event: content_block_stop", "event: ping\ndata: {}\n\nevent: content_block_stop"
    )  # two events a read: (start, block start), (ping, delta), (ping, block stop), (delta, stop)
    upstream.post(MESSAGES_URL, body=event_by_event(body, 2), content_type="text/event-stream")
    response = stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key)
    events = iter(response.streaming_content)
    first, second = next(events), next(events)
    response.close()  # the caller goes away after the second read's events

    assert first.startswith(b"event: message_start") and b"content_block_delta" not in first
    assert second.startswith(b"event: ping") and b'"text": "Hi"' in second  # passed on unparsed
    assert_charged_for_leaving(tara, LEFT_AFTER_HI, output_tokens=2)


@pytest.mark.django_db(transaction=True)  # closing the response ends the request, and its connection
def test_a_caller_who_leaves_after_the_output_usage_pays_the_usage_reported(
    client, upstream, claude_model, tara, tara_key
):
    upstream.post(MESSAGES_URL, body=event_by_event(messages_stream_body()), content_type="text/event-stream")
    response = stream(client, "/v1/messages", {"model": "alpha-claude", "max_tokens": 100}, tara_key)
    for piece in response.streaming_content:
        if b"message_delta" in piece:
            break  # the output's usage has arrived, the final event not yet
    response.close()

    assert_charged_for_leaving(tara, Decimal("0.00078"), output_tokens=40)  # 50 x 3 + 100 x 0.30 + 40 x 15


def test_a_streamed_request_the_upstream_refuses_is_a_plain_error_with_its_status(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(
        CHAT_URL,
        status=404,
        json={
            "error": {
                "message": "The model does not exist",
                "type": "invalid_request_error",
                "code": "model_not_found",
            }
        },
    )
    response = stream(client, "/v1/chat/completions", {"model": "alpha-chat", "messages": []}, tara_key)

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert balance(tara) == Decimal("1.00")


def test_a_responses_stream_cut_ends_with_an_error_event_numbered_after_the_last(
    client, upstream, chat_model, tara, tara_key
):
    upstream.post(
        RESPONSES_URL,
        body=sse_body(
            (
                "response.created",
                {"type": "response.created", "sequence_number": 0, "response": {"id": "r1"}},
            ),
            (
                "response.output_text.delta",
                {"type": "response.output_text.delta", "sequence_number": 1, "delta": "H"},
            ),
        ),
        content_type="text/event-stream",
    )
    events = events_of(stream(client, "/v1/responses", {"model": "alpha-chat", "input": "Hi"}, tara_key))

    name, data = events[-1]
    error = json.loads(data)
    assert (name, error["type"], error["sequence_number"]) == ("error", "error", 2)
    assert error["error"]["code"] == "upstream_stream_cut"
    assert balance(tara) == Decimal("1.00")


# A provider may write the end of a streamed body (its last chunk) just after the final event, not with
# it. The relay waits briefly for it (chat/streaming.py BODY_END_WAIT_SECONDS), so that the upstream's
# connection goes back to the pool and the next call does not connect anew.
BODY_END = b"0\r\n\r\n"


@pytest.fixture
def raw_chat(chat_group, monkeypatch):
    """`raw_chat(rest_after)` → a RawUpstream keeping its connections, whose answer is a chat stream
    whose body ends `rest_after` seconds after its final event, behind the model "raw-chat"."""
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    servers: list[RawUpstream] = []

    def start(rest_after: float) -> RawUpstream:
        events = chat_stream_body().encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        server = RawUpstream(
            head + b"%x\r\n%b\r\n" % (len(events), events),
            rest=BODY_END,
            rest_after=rest_after,
            keep_alive=True,
        )
        servers.append(server)
        upstream = upstream_make(
            name="raw-text", base_url=server.base_url, api_key_env=KEY_ENV, kind="openai"
        )
        text_model_make(model_id="raw-chat", group=chat_group, upstreams=[upstream])
        return server

    yield start
    for server in servers:
        server.close()


def two_streams(client, key) -> None:
    for _ in range(2):
        response = stream(client, "/v1/chat/completions", {"model": "raw-chat", "messages": []}, key)
        assert [data for _, data in events_of(response)][-1] == "[DONE]"


def test_a_stream_whose_body_ends_just_after_its_final_event_gives_its_connection_back(
    client, raw_chat, tara, tara_key
):
    server = raw_chat(rest_after=0.01)

    two_streams(client, tara_key)

    assert (len(server.received), server.connections) == (2, 1)  # the second call reused the first's
    assert balance(tara) == Decimal("1.00") - 2 * CHAT_COST
    assert ledger_check() == []


def test_a_stream_whose_body_end_comes_late_is_not_waited_for(client, raw_chat, tara, tara_key):
    server = raw_chat(rest_after=1.0)  # well past the relay's wait

    started = time.monotonic()
    two_streams(client, tara_key)

    assert time.monotonic() - started < 1.0  # neither call waited for the body's end
    assert (len(server.received), server.connections) == (2, 2)  # the first connection was dropped
    assert balance(tara) == Decimal("1.00") - 2 * CHAT_COST


# What a finished call made is freed by reference counting, not left in reference cycles for the
# garbage collector: a stream's objects live for seconds, so they reach the collector's oldest
# generation, and what is left there in cycles waits for a full pass, which stops every call and
# stream of the worker while it walks them (docs/benchmarks.md, "Serving settings").


def wsgi_answer(application, key: str, *, method: str = "GET", path: str = "/v1/models", body: bytes = b""):
    """Start one call through the WSGI application as a server does (the test client keeps
    references of its own and closes the answer before its last piece is read): the statuses given
    and the answer, which the caller reads, then closes."""
    headers = {"Authorization": f"Bearer {key}"}
    request = RequestFactory().generic(
        method, path, data=body, content_type="application/json", headers=headers
    )
    statuses: list[str] = []
    answer = application(request.environ, lambda status, headers, exc_info=None: statuses.append(status))
    return statuses, answer


def wsgi_call(application, key: str, **call) -> bytes:
    """One call through the WSGI application, its answer read to its end and closed: the body."""
    statuses, answer = wsgi_answer(application, key, **call)
    try:
        received = b"".join(answer)
    finally:
        answer.close()
    assert statuses == ["200 OK"], received
    return received


def cyclic_garbage_of(call) -> Counter[str]:
    """The types of the objects `call` left unreachable in reference cycles, counted."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds goes to gc.garbage, not freed
    try:
        call()
        gc.collect()
        return Counter(type(found).__qualname__ for found in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.django_db(transaction=True)  # closing the answer ends the request, and its connection
def test_a_finished_stream_leaves_nothing_for_the_cycle_collector(raw_chat, tara, tara_key):
    raw_chat(rest_after=0)
    application = get_wsgi_application()
    body = json.dumps({"model": "raw-chat", "messages": [], "stream": True}).encode()

    def streamed() -> None:
        received = wsgi_call(application, tara_key, method="POST", path="/v1/chat/completions", body=body)
        assert received.rstrip().endswith(b"data: [DONE]")

    streamed()  # the first call fills the caches and opens the upstream's connection
    # Without the configuration cache (no Redis) every call loads its credential, whose account and
    # user Django links both ways: that much an authenticated call leaves whatever it does.
    authenticated_only = cyclic_garbage_of(lambda: wsgi_call(application, tara_key))

    assert cyclic_garbage_of(streamed) - authenticated_only == Counter()
    assert balance(tara) == Decimal("1.00") - 2 * CHAT_COST
    assert UsageRecord.objects.filter(amount=CHAT_COST).count() == 2


@pytest.mark.django_db(transaction=True)  # closing the answer ends the request, and its connection
def test_the_caller_has_the_end_of_a_stream_before_the_upstream_ends_its_body(raw_chat, tara, tara_key):
    server = raw_chat(rest_after=0.04)  # the body's last chunk 40 ms after the final event
    application = get_wsgi_application()
    body = json.dumps({"model": "raw-chat", "messages": [], "stream": True}).encode()

    for call in range(2):
        statuses, answer = wsgi_answer(
            application, tara_key, method="POST", path="/v1/chat/completions", body=body
        )
        received = b"".join(answer)  # what the server sends, to the end of the answer
        answered_at = time.monotonic()
        answer.close()  # the server's close, once the answer has been sent

        assert statuses == ["200 OK"] and received.rstrip().endswith(b"data: [DONE]")
        assert answered_at < server.rest_sent[call]  # the end of the answer did not wait for the body's
    # The relay waited for the body's end after the answer instead: the second call reused the
    # first one's connection.
    assert (len(server.received), server.connections) == (2, 1)
    assert balance(tara) == Decimal("1.00") - 2 * CHAT_COST
    assert ledger_check() == []
