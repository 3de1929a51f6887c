#!/usr/bin/env python3
"""One call's time through the gateway's WSGI application, in this process: no gunicorn, no gevent, no
client. It runs with the environment of a gateway that `bench/run.py --serve` started (read from
/proc/PID/environ: its database, Redis, secrets and fake upstreams), so the calls go to the bench's
PostgreSQL, Redis and fake upstream as the served gateway's do, and charge its bench key.

    .venv/bin/python bench/run.py --serve --no-peer      # prints the gateway's pid and key
    .venv/bin/python bench/profile_call.py --pid PID --key KEY 2>/dev/null

It makes --warmup calls, then --calls calls timed without a profiler, then --calls calls under
cProfile, and prints the mean time of a call, the part of it spent in the two billing statements
(each a round trip to PostgreSQL; the capture's includes its commit's WAL flush), then cProfile's
table: the Python function calls made and the functions with the most time of their own. The call
log goes to stderr.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import memory_large  # noqa: E402

STATEMENTS = {
    "the reserve and the capture (billing/statements.py statement_run)": ("statements.py", "statement_run"),
    "the capture with its usage record": ("holds.py", "_hold_capture_statement"),
}


def served_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(): value.decode() for key, value in pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid", type=int, required=True, help="the served gateway's pid (its gunicorn)")
    parser.add_argument("--key", required=True, help="the bench key `bench/run.py --serve` printed")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument(
        "--body", default='{"model":"bench-chat","messages":[{"role":"user","content":"Say hello."}]}'
    )
    args = parser.parse_args(argv)

    os.environ.update(served_environment(args.pid))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="igw-profile-metrics-")
    app = memory_large.gateway_load(source=ROOT)
    body = args.body.encode()

    def calls(count: int) -> None:
        for _ in range(count):
            memory_large.call(app, args.key, path=args.path, body=body)

    calls(args.warmup)
    started = time.perf_counter()
    calls(args.calls)
    plain_ms = (time.perf_counter() - started) * 1000 / args.calls

    profile = cProfile.Profile()
    profile.runcall(calls, args.calls)
    stats = pstats.Stats(profile)
    print(f"{args.calls} calls of {args.path}: {plain_ms:.3f} ms a call without the profiler")
    profiled = stats.get_stats_profile().func_profiles
    for label, (filename, function) in STATEMENTS.items():
        cumulative = sum(
            entry.cumtime
            for name, entry in profiled.items()
            if name == function and entry.file_name.endswith(filename)
        )
        print(f"  {label}: {cumulative * 1000 / args.calls:.3f} ms a call (under the profiler)")
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
