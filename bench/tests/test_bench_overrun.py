"""bench/run.py when a load process overruns its time (a peer that cannot finish its streams): the
process is interrupted, what it measured is kept, its unfinished calls count as that side's errors,
and the run goes on instead of ending on TimeoutExpired with nothing written."""

from __future__ import annotations

import subprocess
import sys
import time

from bench import run

# A load process that measures until interrupted, then prints what it has, as bench/streams.py does.
PATIENT = """
import json, signal, sys, time
def stop(*_):
    print("BENCH_JSON " + json.dumps({"requests": 3, "errors": 1, "errors_by_kind": {"timeout": 1}}))
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
time.sleep(60)
"""
# One that ignores the interruption and prints nothing.
STUCK = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"


def _start(source: str) -> tuple[subprocess.Popen, list[str]]:
    argv = [sys.executable, "-c", source]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # its signal handler is set
    return process, argv


def test_a_load_process_that_overruns_is_interrupted_and_what_it_measured_is_kept():
    process, argv = _start(PATIENT)
    started = time.monotonic()

    result = run.load_wait(process, argv, timeout=0.5)

    assert time.monotonic() - started < 10
    assert result == {"requests": 3, "errors": 1, "errors_by_kind": {"timeout": 1}, "overran": True}
    assert process.poll() is not None


def test_its_unfinished_streams_count_as_errors():
    result = {"requests": 3, "errors": 1, "errors_by_kind": {"timeout": 1}, "overran": True}

    run.overrun_errors_count(result, calls=10)

    assert result["errors"] == 7  # 3 answered + 7 errors = the 10 calls asked for
    assert result["errors_by_kind"] == {"timeout": 1, "overran": 6}


def test_a_load_process_that_prints_nothing_even_when_interrupted_is_killed(monkeypatch):
    monkeypatch.setattr(run, "OVERRUN_GRACE_S", 0.5)
    process, argv = _start(STUCK)

    assert run.load_wait(process, argv, timeout=0.5) is None
    assert process.poll() is not None
    failed = run.overrun_result(calls=2000, streamed=True)
    assert (failed["requests"], failed["errors"], failed["overran"]) == (0, 2000, True)


def test_a_side_that_answered_nothing_still_gets_its_line_in_the_report():
    failed = dict(run.overrun_result(calls=2000, streamed=True), target="peer")
    failed.update(rss_total_mb=None, pg_connections_max=None, other_cpu_cores=0.0)
    report = {
        "scenarios": [{"id": "chat-streams-1k", "results": [failed]}],
        "gunicorn": {"workers": 2},
        "db_pool_per_worker": 16,
        "postgres": {"max_connections": 100},
    }

    assert "errors 2000" in run.result_line(failed, streamed=True)
    assert any(
        line.startswith("chat-streams-1k peer: 2000 errors, no stream answered")
        for line in run.derive(report)
    )
