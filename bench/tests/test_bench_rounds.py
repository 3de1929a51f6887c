"""bench/run.py's interleaved rounds: how a scenario's load is split, and how a target's rounds are merged
into its one row of the report (the verdicts against the peer are computed from that row)."""

from __future__ import annotations

import pytest

from bench import run


def _measured(**fields):
    """What scenario_run returns for one target and one round, with the figures a test sets."""
    return {
        "target": "gateway",
        "errors": 0,
        "bytes": 1000,
        "rss_total_mb": 250.0,
        "rss_total_idle_mb": 240.0,
        "rss_worker_peak_mb": 110.0,
        "rss_worker_idle_mb": 100.0,
        "pg_connections_max": 8,
        "pg_busy_max": 1,
        "cpu_s": 1.0,
        "wall_s": 2.0,
        "other_cpu_cores": 0.1,
        **fields,
    }


def _wrk(latencies_us, *, duration, rps=None, **fields):
    counts = {}
    for value in latencies_us:
        counts[value] = counts.get(value, 0) + 1
    ordered = sorted(latencies_us)
    return _measured(
        requests=len(latencies_us),
        duration_s=duration,
        rps=rps if rps is not None else len(latencies_us) / duration,
        p50_ms=ordered[len(ordered) // 2] / 1000,
        max_ms=ordered[-1] / 1000,
        mean_ms=sum(ordered) / len(ordered) / 1000,
        non_2xx=0,
        connect_errors=0,
        read_errors=0,
        write_errors=0,
        timeouts=0,
        latency_us=sorted(counts.items()),
        **fields,
    )


def test_merged_rounds_give_the_percentiles_of_all_their_calls_together():
    fast = _wrk([1000] * 90 + [2000] * 10, duration=1.0)  # a fast phase of the machine
    slow = _wrk([3000] * 100, duration=2.0, cpu_s=3.0, wall_s=2.5, rss_total_mb=300.0, pg_connections_max=12)

    merged = run.rounds_merge([fast, slow])

    assert merged["requests"] == 200
    assert merged["duration_s"] == 3.0
    assert merged["rps"] == round(200 / 3.0, 2)
    # nearest rank over the 200 calls: 90 at 1 ms, 10 at 2 ms, 100 at 3 ms
    assert merged["p50_ms"] == 2.0
    assert merged["p90_ms"] == 3.0
    assert merged["p99_ms"] == 3.0
    assert merged["max_ms"] == 3.0
    assert merged["cpu_ms_per_request"] == 20.0  # 4 CPU-seconds over 200 calls
    assert merged["rss_total_mb"] == 300.0
    assert merged["rss_total_idle_mb"] == 240.0  # before the first round
    assert merged["pg_connections_max"] == 12
    assert "latency_us" not in merged  # the histograms are merged, not kept
    assert merged["rounds"] == [{"rps": 100.0, "p50_ms": 1.0}, {"rps": 50.0, "p50_ms": 3.0}]


def _streams(ttfb_ms, *, billing):
    return _measured(
        requests=len(ttfb_ms),
        duration_s=1.0,
        rps=float(len(ttfb_ms)),
        errors_by_kind={},
        events=50 * len(ttfb_ms),
        streams=len(ttfb_ms),
        streams_max_open=1,
        connects=1,
        interrupted=False,
        ttfb_ms={"p50": sorted(ttfb_ms)[len(ttfb_ms) // 2]},
        p50_ms=sorted(ttfb_ms)[len(ttfb_ms) // 2],  # as streams_run sets it
        samples={"ttfb": ttfb_ms, "ttlb": [t + 500 for t in ttfb_ms], "ttle": [t + 499 for t in ttfb_ms],
                 "gaps": [10.0] * 49 * len(ttfb_ms)},
        billing=billing,
    )  # fmt: skip


def _billing(calls):
    return {
        "streams_answered": calls,
        "charges": calls,
        "calls_charged": calls,
        "amount": "0.00100000",
        "holds_open": 0,
        "check_ledger_exit": 0,
        "check_ledger": ["Ledger OK"],
        "exactly_once": True,
    }


def test_merged_stream_rounds_pool_their_samples_and_add_up_their_billing_checks():
    merged = run.rounds_merge(
        [_streams([3.0, 3.2, 3.4], billing=_billing(3)), _streams([6.0, 6.2], billing=_billing(2))]
    )

    assert merged["requests"] == 5
    assert merged["ttfb_ms"] == {"p50": 3.4, "p90": 6.2, "p99": 6.2, "max": 6.2}
    assert merged["p50_ms"] == 3.4  # a streamed row's latency is its time to the first event
    assert merged["ttle_ms"]["p50"] == 502.4
    assert merged["gap_ms"]["p999"] == 10.0
    assert merged["events_per_s"] == 125.0
    assert merged["billing"]["charges"] == merged["billing"]["streams_answered"] == 5
    assert merged["billing"]["amount"] == "0.00200000"
    assert merged["billing"]["exactly_once"] is True
    # a streamed round's p50 is its time to the first event, as the row's is
    assert merged["rounds"] == [{"rps": 3.0, "p50_ms": 3.2}, {"rps": 2.0, "p50_ms": 6.2}]


def test_one_round_that_charged_twice_fails_the_merged_billing_check():
    twice = {**_billing(2), "charges": 3, "exactly_once": False}
    merged = run.rounds_merge([_streams([3.0], billing=_billing(1)), _streams([3.0, 3.1], billing=twice)])

    assert merged["billing"]["exactly_once"] is False


def test_the_ratio_scenarios_split_their_load_into_rounds_and_the_others_do_not():
    by_id = {scenario.id: scenario for scenario in run.scenarios(quick=False)}

    overhead = by_id["chat-overhead"]
    assert overhead.rounds == run.ROUNDS == 4
    first, later = run.round_part(overhead, 0), run.round_part(overhead, 1)
    assert first.max_requests == later.max_requests == 500  # 2,000 calls in all
    assert first.warmup == overhead.warmup
    assert later.warmup == run.ROUND_REWARM_S
    assert run.round_part(by_id["chat-throughput"], 2).duration == 5.0  # 20 s in all

    streams = by_id["chat-streams-1k"]
    assert streams.rounds == 1
    assert run.round_part(streams, 0) is streams
    assert all(s.rounds == 1 for s in run.scenarios(quick=False, rounds=1))


def test_the_report_gives_each_rounds_own_ratio_next_to_the_merged_one():
    by = {
        ("chat-throughput", "gateway"): {"rps": 900.0, "rounds": [{"rps": 800.0}, {"rps": 1000.0}]},
        ("chat-throughput", "peer"): {"rps": 300.0, "rounds": [{"rps": 250.0}, {"rps": 400.0}]},
    }

    text = run.per_round(by, "chat-throughput", run.rps_ratio)

    assert text == "; in its 2 rounds 2.50 to 3.20x (median 2.85x)"
    assert run.per_round({}, "chat-throughput", run.rps_ratio) == ""


def test_the_added_latency_ratio_is_over_direct_for_both_sides():
    gateway, peer, direct = {"p50_ms": 3.1}, {"p50_ms": 10.1}, {"p50_ms": 0.1}

    assert run.added_p50(gateway, peer, direct) == pytest.approx(0.3)
