#!/usr/bin/env python3
"""Interleaved A/B runs of gateway variants on one setup, for decisions the full suite is too noisy for.

On a shared VM consecutive `bench/run.py` runs of the same code differ by up to ±10 %, more than most
changes are worth. This script starts PostgreSQL, Redis and the latency-0 fake upstream once, serves
every variant side by side (each its own gunicorn on its own port, on the same database and key), and
measures them in turn, round after round: A, B, C, A, B, C, ... Only the variant being measured runs;
the others are frozen (SIGSTOP). Each round's result is compared with the first variant's result of
the same round, so slow phases of the machine hit both sides of a comparison alike.

A variant is `NAME` optionally followed by `:` and comma-separated settings:

- `NAME=VALUE`: environment for that gateway (as `bench/run.py --set`);
- `source=head` or `source=worktree` (default): the code under test, as `bench/run.py --source`;
- `patch=FILE`: a patch applied to that variant's snapshot.

    .venv/bin/python bench/ab.py base gthread:GUNICORN_WORKER_CLASS=gthread
    .venv/bin/python bench/ab.py --rounds 8 before:source=head after
    .venv/bin/python bench/ab.py --connections 1 --duration 6 base gevent:GUNICORN_WORKER_CLASS=gevent
    .venv/bin/python bench/ab.py --scenario chat-streams-1k --rounds 4 before:source=head after
    .venv/bin/python bench/ab.py --burst 5 --connections 1 --scenario chat-overhead base other:...

`--scenario ID` measures one of bench/run.py's scenarios (its model, body and, for a streamed one, its
connections, calls and stream client) instead of image calls to the latency-0 upstream.

Reports, per variant, requests/s and the gateway's CPU ms per request of every round, their medians,
and the median of the per-round ratios to the first variant; for a streamed scenario each round's log
line also gives the event gap p99 and the first event's p50, p90, p99 and mean. Nothing is written to
docs/.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import run


def variant_parse(spec: str) -> tuple[str, dict[str, str], str, list[str]]:
    name, _, rest = spec.partition(":")
    env: dict[str, str] = {}
    source, patches = "worktree", []
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key == "source":
            source = value
        elif key == "patch":
            patches.append(value)
        else:
            env[key] = value
    return name, env, source, patches


def targets_signal(
    targets: list[tuple[str, run.Target]],
    sig: int,
    *,
    only: run.Target | None = None,
    others: int | None = None,
) -> None:
    """Send `sig` to every gateway's processes (or only to `only`'s, and `others` to the rest): the
    variants not being measured are stopped so they use no CPU meanwhile."""
    for _, target in targets:
        send = sig if only is None or target is only else others
        if send is None:
            continue
        for pid in run.proc_tree(target.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, send)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="+", metavar="VARIANT")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per measurement")
    parser.add_argument("--connections", type=int, help="for wrk's scenarios (default: the scenario's)")
    parser.add_argument("--requests", type=int, help="streamed calls per round (default: the scenario's)")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--scenario", default="throughput", help="a bench/run.py scenario id")
    parser.add_argument(
        "--burst", type=float, default=0.0, metavar="SECONDS",
        help="first load each variant at 64 connections this long (its database pool grows to its size, "
        "as after the full suite's concurrent scenarios), then measure",
    )  # fmt: skip
    args = parser.parse_args(argv)
    scenario = next(s for s in run.scenarios(quick=False) if s.id == args.scenario)
    if args.connections and not scenario.streamed:
        scenario = run.dataclasses.replace(scenario, connections=args.connections)
    if args.requests and scenario.streamed:
        scenario = run.dataclasses.replace(scenario, max_requests=args.requests)
    args.connections = scenario.connections
    variants = [variant_parse(spec) for spec in args.variants]

    procs = run.Processes()
    workdir = Path(tempfile.mkdtemp(prefix="igw-ab-"))
    targets: list[tuple[str, run.Target]] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        wrk = run.ensure_apt("wrk", "wrk")
        pg = run.postgres_start(procs, workdir, max_connections=100 * len(variants))
        redis_url = run.redis_start(procs, workdir)
        key = None
        base_env = run.gateway_env(pg=pg, redis_url=redis_url, port=0, workdir=workdir, overrides={})
        for index, (name, overrides, source, patches) in enumerate(variants):
            vdir = workdir / f"v{index}"
            vdir.mkdir()
            src = run.source_snapshot(vdir, source=source, overlays=[], patches=patches)
            if index == 0:
                port = run.fake_upstream_start(procs, workdir, src, name="fast", latency=0, image_bytes=0)
                ports = dict.fromkeys(run.UPSTREAMS, port)
                if scenario.upstream in run.UPSTREAMS and scenario.upstream != "fast":  # a slow one
                    latency, size = run.UPSTREAMS[scenario.upstream]
                    ports[scenario.upstream] = run.fake_upstream_start(
                        procs, workdir, src, name=scenario.upstream, latency=latency, image_bytes=size
                    )
                for upstream, (ttft, events, interval) in run.TEXT_UPSTREAMS.items():
                    ports[upstream] = run.text_upstream_start(
                        procs, workdir, src, name=upstream, ttft=ttft, events=events, interval=interval
                    )
            env = dict(base_env, **overrides)
            bind = run.free_port()
            env.update(GATEWAY_BIND=f"127.0.0.1:{bind}", GATEWAY_PUBLIC_URL=f"http://127.0.0.1:{bind}")
            if key is None:  # the first variant migrates, loads the bench config and makes the key
                target = run.gateway_start(procs, vdir, src, env, ports)
                key = target.key
            else:
                target = run.gateway_serve(procs, vdir, src, env, key=key, name=f"variant {name}")
            targets.append((name, target))
            run.log(f"variant {name}: :{bind} {overrides or ''} source={source} {patches or ''}")

        if args.burst:
            burst = run.dataclasses.replace(scenario, path=run.IMAGES_PATH, body=None, model="bench-fast")
            for name, target in targets:
                targets_signal(targets, signal.SIGCONT, only=target, others=signal.SIGSTOP)
                run.log(f"burst {name}: 64 connections, {args.burst:g} s")
                run.wrk_run(wrk, target, burst, connections=64, duration=args.burst)
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in targets}
        for round_ in range(1, args.rounds + 1):
            for name, target in targets:
                targets_signal(targets, signal.SIGCONT, only=target, others=signal.SIGSTOP)
                run.drain(target)
                if args.warmup and not scenario.streamed:
                    run.wrk_run(wrk, target, scenario, connections=args.connections, duration=args.warmup)
                cpu_before = run.proc_cpu_seconds(run.proc_tree(target.pid))
                if scenario.streamed:
                    result = run.streams_run(target, scenario, requests=scenario.max_requests, samples=True)
                    result["p50_ms"] = result["gap_ms"]["p99"]  # what a streamed round is judged by
                    first_events = result["samples"]["ttfb"]
                else:
                    result = run.wrk_run(wrk, target, scenario, connections=args.connections,
                                         duration=args.duration)  # fmt: skip
                cpu = run.proc_cpu_seconds(run.proc_tree(target.pid)) - cpu_before
                rps = result["rps"]
                ms = cpu * 1000 / max(1, result["requests"])
                latency = result["ttfb_ms"]["p50"] if scenario.streamed else result["p50_ms"]  # first event's
                results[name].append((rps, ms, latency))
                judged = (f"event gap p99 {result['p50_ms']:.2f} ms (max {result['gap_ms']['max']:.2f}), "
                          f"first event p50 {result['ttfb_ms']['p50']:.2f} ms "
                          f"(p90 {result['ttfb_ms']['p90']:.2f}, p99 {result['ttfb_ms']['p99']:.2f}, "
                          f"mean {statistics.fmean(first_events):.2f})"
                          if scenario.streamed else f"p50 {result['p50_ms']:.2f} ms")  # fmt: skip
                run.log(f"round {round_} {name}: {rps:.1f} req/s, {ms:.2f} ms CPU/req, {judged}, "
                        f"errors {result['errors']}")  # fmt: skip
        targets_signal(targets, signal.SIGCONT)
        first = targets[0][0]
        print(f"\n{args.rounds} rounds x {args.duration:g} s, {args.connections} connections; "
              f"ratios are per round against {first}")  # fmt: skip
        for name, _ in targets:
            rps = [r for r, _, _ in results[name]]
            ms = [m for _, m, _ in results[name]]
            p50 = [p for _, _, p in results[name]]
            ratios = [r / b for (r, _, _), (b, _, _) in zip(results[name], results[first], strict=True)]
            p50_ratios = [p / b for (_, _, p), (_, _, b) in zip(results[name], results[first], strict=True)]
            print(f"{name:>12}: req/s median {statistics.median(rps):7.1f} "
                  f"[{', '.join(f'{r:.0f}' for r in rps)}]  CPU ms/req median {statistics.median(ms):.2f} "
                  f"[{', '.join(f'{m:.2f}' for m in ms)}]  ratio median {statistics.median(ratios):.3f} "
                  f"[{min(ratios):.3f}..{max(ratios):.3f}]  "
                  f"{'first event ' if scenario.streamed else ''}p50 ms median {statistics.median(p50):.2f} "
                  f"[{', '.join(f'{v:.2f}' for v in p50)}] ratio median {statistics.median(p50_ratios):.3f} "
                  f"[{min(p50_ratios):.3f}..{max(p50_ratios):.3f}]")  # fmt: skip
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        run.signals_hold()
        targets_signal(targets, signal.SIGCONT)  # a stopped process cannot handle its SIGTERM
        for process in run.LOADS:
            with contextlib.suppress(Exception):
                process.kill()
        procs.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
