"""bench/text_upstream.py, the benchmarks' fake text upstream, as the official SDKs see it."""

from __future__ import annotations

import json
import socket
import time

import anthropic
import openai
import pytest
import requests

from tests.listening_process import listening_process

MESSAGES = [{"role": "user", "content": "Say hello"}]  # 3 + ceil(13 characters / 4) = 7 input tokens
DELTAS = ["tok ", "ken ", "tok ", "ken ", "tok "]  # two texts in turn, never one repeated
TEXT = "".join(DELTAS)
SERVER_ARGS = ["--ttft", "0.05", "--events", "5", "--interval", "0.01"]


@pytest.fixture(scope="module")
def port():
    with listening_process("bench.text_upstream", *SERVER_ARGS) as port:
        yield port


@pytest.fixture
def oai(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)


@pytest.fixture
def claude(port):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="x", max_retries=0)


def test_it_answers_chat_completions_with_one_token_per_delta(oai):
    completion = oai.chat.completions.create(model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 5)


def test_it_streams_chat_completions_with_usage_last(oai):
    chunks = list(
        oai.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == DELTAS
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (7, 5)
    assert all(c.usage is None for c in chunks[:-1])


def test_it_streams_chat_completions_without_usage_unless_asked(oai):
    chunks = list(oai.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert all(c.choices and c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_it_truncates_at_the_requests_limit_and_takes_the_events_from_a_header(oai):
    completion = oai.chat.completions.create(model="m", messages=MESSAGES, max_completion_tokens=2)
    assert (completion.choices[0].finish_reason, completion.usage.completion_tokens) == ("length", 2)
    completion = oai.chat.completions.create(
        model="m", messages=MESSAGES, extra_headers={"x-bench-events": "3"}
    )
    assert (completion.choices[0].finish_reason, completion.usage.completion_tokens) == ("stop", 3)


def test_it_answers_and_streams_responses(oai):
    response = oai.responses.create(model="m", input="Say hello")  # 3 + ceil(9 / 4) input tokens
    assert (response.output_text, response.usage.input_tokens, response.usage.output_tokens) == (TEXT, 6, 5)
    with oai.responses.stream(model="m", input="Say hello") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert sum(e.type == "response.output_text.delta" for e in events) == 5
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert (final.status, final.output_text, final.usage.output_tokens) == ("completed", TEXT, 5)


def test_it_answers_and_streams_messages_and_counts_tokens(claude):
    message = claude.messages.create(model="m", max_tokens=100, messages=MESSAGES)
    assert (message.content[0].text, message.usage.input_tokens, message.usage.output_tokens) == (TEXT, 7, 5)
    with claude.messages.stream(model="m", max_tokens=100, messages=MESSAGES) as stream:
        deltas = [e.delta.text for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas == DELTAS
    assert (final.usage.input_tokens, final.usage.output_tokens, final.stop_reason) == (7, 5, "end_turn")
    assert claude.messages.count_tokens(model="m", messages=MESSAGES).input_tokens == 7


def test_a_stream_takes_ttft_plus_its_events_and_the_stats_count_them(port, oai):
    root = f"http://127.0.0.1:{port}"
    requests.post(f"{root}/_stats/reset", timeout=5)
    started = time.monotonic()
    stream = oai.chat.completions.create(
        model="m",
        messages=MESSAGES,
        stream=True,
        extra_headers={"x-bench-events": "5", "x-bench-ttft": "0.05", "x-bench-interval": "0.01"},
    )
    assert sum(bool(c.choices[0].delta.content) for c in stream) == 5
    assert time.monotonic() - started >= 0.05 + 5 * 0.01
    stats = requests.get(f"{root}/_stats", timeout=5).json()
    assert {k: stats[k] for k in ("requests", "streams_started", "streams_finished", "events_sent")} == {
        "requests": 1,
        "streams_started": 1,
        "streams_finished": 1,
        "events_sent": 5,
    }
    assert stats["streams_open"] == 0
    assert 0 <= stats["tick_lateness_ms"]["p50"] <= stats["tick_lateness_ms"]["max"]


def test_a_client_that_goes_away_mid_stream_leaves_no_stream_open(port):
    body = json.dumps({"model": "m", "stream": True, "messages": MESSAGES}).encode()
    head = (
        f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-bench-events: 100\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(head.encode() + body)
        assert client.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
    deadline = time.monotonic() + 2
    while requests.get(f"http://127.0.0.1:{port}/_stats", timeout=5).json()["streams_open"] and (
        time.monotonic() < deadline
    ):
        time.sleep(0.02)
    assert requests.get(f"http://127.0.0.1:{port}/_stats", timeout=5).json()["streams_open"] == 0


def test_it_answers_unknown_paths_and_bad_json_with_errors(port):
    root = f"http://127.0.0.1:{port}"
    missing = requests.post(f"{root}/v1/nope", json={}, timeout=5)
    assert (missing.status_code, "error" in missing.json()) == (404, True)
    bad = requests.post(f"{root}/v1/chat/completions", data=b"{", timeout=5)
    assert (bad.status_code, "error" in bad.json()) == (400, True)
