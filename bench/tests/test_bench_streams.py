"""bench/streams.py, the benchmarks' stream client, against bench/text_upstream.py: what it counts and
times, and how it names what went wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.listening_process import listening_process

ROOT = Path(__file__).resolve().parents[2]
EVENTS, INTERVAL_S, TTFT_S = 5, 0.01, 0.05
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say hello"}], "stream": True}


@pytest.fixture(scope="module")
def port():
    with listening_process(
        "bench.text_upstream", "--ttft", str(TTFT_S), "--events", str(EVENTS), "--interval", str(INTERVAL_S)
    ) as port:
        yield port


def streams(port: int, *args: str, body: dict | None = None, path: str = "/v1/chat/completions") -> dict:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "streams.py"), "--port", str(port), "--path", path,
         "--body", json.dumps(body or CHAT), "--timeout", "10", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    (line,) = [line for line in completed.stdout.splitlines() if line.startswith("BENCH_JSON ")]
    return json.loads(line[len("BENCH_JSON ") :])


def events_per_stream(port: int) -> int:
    """What one stream of the fake holds, as read by another client: its blank-line-ended events."""
    answer = requests.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT, timeout=10)
    return answer.text.count("\n\n")


def test_it_runs_the_calls_asked_for_on_its_connections_and_counts_every_event(port):
    result = streams(port, "--connections", "3", "--requests", "9", "--expect-events", str(EVENTS))

    assert (result["requests"], result["errors"], result["errors_by_kind"]) == (9, 0, {})
    assert result["connects"] == 3 and result["streams"] == 9
    assert result["events"] == 9 * events_per_stream(port)
    assert result["streams_max_open"] == 3


def test_it_times_the_first_event_the_stream_and_the_gaps_between_events(port):
    result = streams(port, "--connections", "1", "--requests", "4")

    assert TTFT_S * 1000 <= result["ttfb_ms"]["p50"] < TTFT_S * 1000 + 40
    stream_ms = (TTFT_S + (EVENTS - 1) * INTERVAL_S) * 1000
    assert stream_ms <= result["ttle_ms"]["p50"] <= result["ttlb_ms"]["p50"] < stream_ms + 60
    # Between the deltas, the upstream's interval; the events sent together at the end, 0.
    assert result["gap_ms"]["p50"] >= 0 and INTERVAL_S * 1000 * 0.8 <= result["gap_ms"]["max"] < 60


def test_it_counts_a_stream_with_too_few_events_and_a_refusal_by_kind(port):
    short = streams(port, "--connections", "1", "--requests", "2", "--expect-events", "50")
    assert (short["requests"], short["errors_by_kind"]) == (0, {"short": 2})

    refused = streams(port, "--connections", "2", "--requests", "4", path="/v1/nothing-here")
    assert refused["requests"] == 0 and sum(refused["errors_by_kind"].values()) == 4
    assert all(kind.isdigit() and kind.startswith("4") for kind in refused["errors_by_kind"])
