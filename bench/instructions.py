#!/usr/bin/env python3
"""Instructions per image call, counted by valgrind: a measure of the gateway's CPU cost per call that
the machine's speed does not change.

On a shared VM the CPU time of the same call varies by ±30 % from minute to minute, more than most
changes are worth. valgrind's callgrind counts the instructions a process executes instead, which
depends only on the code, its inputs and its environment. This script:

1. starts the fake upstream (`python -m bench.upstream`, small answers) and prepares a database as
   `bench/memory_large.py` does (migrated, one upstream, model, account and key);
2. for each checkout given (`--source`, default this one), runs two processes under
   `valgrind --tool=callgrind` that load the gateway's WSGI application, make `--warmup` calls, then
   `--calls` more (the second process) or none (the first); both do the same start-up and warm-up,
   so the difference of their counts divided by `--calls` is the instructions of one call;
3. prints instructions per call for each checkout, and the ratio to the first.

A call here is the whole request path inside the application (middleware, DRF, authentication,
billing against the database, the upstream adapter over real HTTP, rendering), not the HTTP server
in front of it. Under valgrind a call takes ~50x longer, so time-based paths run more often than in
production (the circuit breaker reads Redis at most every 250 ms per process): compare checkouts with
each other, not with a live server. Run from the repository root, on the database you would bench:

    DATABASE_URL=postgres://postgres@127.0.0.1:5433/gw_d REDIS_URL=redis://127.0.0.1:6380/4 \\
        .venv/bin/python bench/instructions.py --source /tmp/before --source .
        # /tmp/before: e.g. mkdir /tmp/before && git archive HEAD | tar -x -C /tmp/before
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import memory_large

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, action="append", help="checkout to measure (repeatable)")
    parser.add_argument("--calls", type=int, default=100, help="calls counted (default 100)")
    parser.add_argument("--warmup", type=int, default=20, help="calls before counting (default 20)")
    parser.add_argument(
        "--server",
        action="store_true",
        help="count a gunicorn worker (one, with gunicorn.conf.py) serving the calls over HTTP",
    )
    parser.add_argument("--child", nargs=3, metavar=("SOURCE", "KEY", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(source=Path(args.child[0]), key=args.child[1], calls=int(args.child[2]))

    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    sources = [path.resolve() for path in (args.source or [ROOT])]
    workdir = Path(tempfile.mkdtemp(prefix="igw-instructions-"))
    upstream = None
    try:
        upstream, port = memory_large.upstream_start(source=sources[0], image_bytes=0)
        environ = memory_large.gateway_environ(workdir=workdir)
        key = _prepare(source=sources[0], environ=environ, upstream_port=port)
        counts = {}
        counted = _served if args.server else _counted
        for source in sources:
            base = counted(source=source, key=key, calls=args.warmup, environ=environ)
            more = counted(source=source, key=key, calls=args.warmup + args.calls, environ=environ)
            counts[str(source)] = (more - base) / args.calls
    finally:
        if upstream is not None:
            upstream.terminate()
            upstream.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    first = next(iter(counts.values()))
    for source, per_call in counts.items():
        print(f"{per_call:14,.0f} instructions per call  {per_call / first:6.3f}  {source}")
    print(
        json.dumps(
            {
                "server": args.server,
                "calls": args.calls,
                "warmup": args.warmup,
                "instructions_per_call": counts,
            }
        )
    )
    return 0


def _prepare(*, source: Path, environ: dict[str, str], upstream_port: int) -> str:
    """Migrate and configure the database in a separate process (natively); returns the API key."""
    code = (
        "import os, sys, json; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from bench import memory_large as m;"
        "app, key = m.gateway_setup(source=Path(sys.argv[1]), workdir=Path(sys.argv[2]),"
        " upstream_port=int(sys.argv[3]), environ=json.loads(sys.argv[4])); print('KEY', key)"
    )
    workdir = Path(environ["MEDIA_ROOT"]).parent
    output = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code, str(ROOT), str(workdir), str(upstream_port), json.dumps(environ)],
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        check=True,
    )
    return re.search(r"^KEY (\S+)$", output.stdout, re.MULTILINE).group(1)


def _counted(*, source: Path, key: str, calls: int, environ: dict[str, str]) -> int:
    """Instructions executed by a process that loads `source` and makes `calls` calls."""
    output = subprocess.run(  # noqa: S603
        [  # noqa: S607 - valgrind from the PATH, like wrk in bench/run.py
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(source),
            key,
            str(calls),
        ],
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
    )
    if output.returncode != 0 or "CALLS OK" not in output.stdout:
        raise RuntimeError(f"the counted run failed:\n{output.stdout[-2000:]}\n{output.stderr[-4000:]}")
    match = re.search(r"Collected : (\d+)", output.stderr)
    if match is None:
        raise RuntimeError(f"valgrind printed no count:\n{output.stderr[-2000:]}")
    return int(match.group(1))


def _served(*, source: Path, key: str, calls: int, environ: dict[str, str]) -> int:
    """Instructions executed by one gunicorn worker (gunicorn.conf.py's settings, 1 worker) that
    starts, serves `calls` calls on one kept-alive connection, and stops."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gunicorn = Path(sys.executable).with_name("gunicorn")
    server = subprocess.Popen(  # noqa: S603
        [  # noqa: S607 - valgrind from the PATH
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(gunicorn),
            "--config",
            str(source / "gunicorn.conf.py"),
            "--chdir",
            str(source),
            "--workers",
            "1",
            "--bind",
            f"127.0.0.1:{port}",
            "gateway_project.wsgi",
        ],
        env={**os.environ, **environ, "GUNICORN_ACCESSLOG": os.environ.get("GUNICORN_ACCESSLOG", "-")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        connection = _connected(port=port, server=server)
        body = json.dumps(
            {"model": memory_large.MODEL, "prompt": "a lighthouse", "n": 1, "size": "1024x1024"}
        )
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        for _ in range(calls):
            connection.request("POST", "/v1/images/generations", body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"the gateway answered {response.status}: {answer[:500]!r}")
        connection.close()
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=600)
    # One count per process: the arbiter's, then the worker's. The worker is the one that served.
    counts = [int(count) for _, count in re.findall(r"==(\d+)== Collected : (\d+)", stderr)]
    if len(counts) != 2:
        raise RuntimeError(f"expected the counts of an arbiter and a worker:\n{stderr[-3000:]}")
    return max(counts)  # the arbiter only starts and watches; the worker imports and serves


def _connected(*, port: int, server: subprocess.Popen, timeout: float = 300) -> http.client.HTTPConnection:
    """A connection to the server once it answers (it starts ~50x slower under valgrind)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{server.stderr.read()[-3000:] if server.stderr else ''}")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            connection.request("GET", "/v1/models")
            connection.getresponse().read()
            return connection
        except OSError:
            connection.close()
            time.sleep(0.5)
    raise RuntimeError("gunicorn did not answer in time")


def _child(*, source: Path, key: str, calls: int) -> int:
    app = memory_large.gateway_load(source=source)
    for _ in range(calls):
        memory_large.call(app, key)
    print("CALLS OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
