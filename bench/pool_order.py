#!/usr/bin/env python3
"""The database pool's lending order, measured: LIFO (`core.db.LifoConnectionPool`, the
connection given back last) against psycopg_pool's own FIFO (the one idle the longest).

Runs image calls through the gateway's WSGI application in this process, one after another, against
the fake upstream (small answers) and the PostgreSQL database of `DATABASE_URL` (migrated and
configured as `bench/memory_large.py` does), with `--connections` idle connections in the pool. Rounds
alternate the two orders (FIFO first in even rounds, LIFO first in odd ones), so a slow phase of the
machine hits both. Reports per round and as medians: wall time per call, this process's CPU per call,
and the CPU of PostgreSQL's processes per call (every `postgres` process on the machine, from /proc:
run it on a cluster nothing else uses; /proc counts in clock ticks, ~25 µs per call at 400 calls).

    DATABASE_URL=postgres://postgres@127.0.0.1:5433/gw_pool REDIS_URL=redis://127.0.0.1:6380/4 \\
        .venv/bin/python bench/pool_order.py --rounds 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import memory_large

ROOT = Path(__file__).resolve().parent.parent


def postgres_cpu_seconds() -> float:
    """utime + stime of every process named postgres."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, _, rest = text.partition(" (")[2].partition(") ")
        if name != "postgres":
            continue
        fields = rest.split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=400, help="calls measured per round and order")
    parser.add_argument("--connections", type=int, default=4, help="idle connections in the pool")
    args = parser.parse_args(argv)
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        print("needs DATABASE_URL=postgres://... (a database this may migrate)", file=sys.stderr)
        return 2

    workdir = Path(tempfile.mkdtemp(prefix="igw-pool-order-"))
    upstream, port = memory_large.upstream_start(source=ROOT, image_bytes=0)
    try:
        app, key = memory_large.gateway_setup(source=ROOT, workdir=workdir, upstream_port=port)
        from django.db import connections
        from psycopg_pool import ConnectionPool

        from core.db import LifoConnectionPool

        for _ in range(50):
            memory_large.call(app, key)
        pool = connections["default"].pool
        held = [pool.getconn() for _ in range(args.connections)]
        for conn in held:
            pool.putconn(conn)
        orders = {"fifo": ConnectionPool, "lifo": LifoConnectionPool}
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in orders}
        for round_ in range(args.rounds):
            for name in list(orders) if round_ % 2 == 0 else list(orders)[::-1]:
                pool.__class__ = orders[name]
                for _ in range(20):
                    memory_large.call(app, key)
                postgres, wall, cpu = postgres_cpu_seconds(), time.perf_counter(), time.process_time()
                for _ in range(args.calls):
                    memory_large.call(app, key)
                per_call = [
                    (time.perf_counter() - wall) / args.calls * 1e6,
                    (time.process_time() - cpu) / args.calls * 1e6,
                    (postgres_cpu_seconds() - postgres) / args.calls * 1e6,
                ]
                results[name].append(tuple(per_call))
                print(
                    f"round {round_ + 1} {name}: wall {per_call[0]:.0f} us, "
                    f"this process {per_call[1]:.0f} us, PostgreSQL {per_call[2]:.0f} us CPU per call",
                    flush=True,
                )
        pool.__class__ = LifoConnectionPool
        for name, rows in results.items():
            wall, cpu, postgres = (statistics.median(row[i] for row in rows) for i in range(3))
            print(
                f"{name}: median wall {wall:.0f} us, this process {cpu:.0f} us, PostgreSQL {postgres:.0f} us "
                f"CPU per call ({args.rounds} rounds x {args.calls} calls, {args.connections} connections)"
            )
    finally:
        upstream.terminate()
        upstream.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
