#!/usr/bin/env python3
"""Memory and CPU per image call with large b64_json answers, through the gateway's real request path.

Runs POST /v1/images/generations (`response_format: b64_json`) through the gateway's WSGI application
in this process (every middleware, DRF, authentication, billing, the upstream adapter over real HTTP,
rendering), against a real fake upstream process (`python -m bench.upstream`, i.e.
tests/fake_upstream.py) that answers a ~4 MB PNG as base64 (5.3 MB of JSON), and reports:

- tracemalloc peak: the most memory Python had allocated above the idle baseline while the calls ran,
  for one call alone and for N calls in flight at once (divided by N), also as a multiple of the
  response body: the copies of the body one call holds at its worst moment;
- RSS: the process's peak resident memory (VmHWM, reset before the run) above its idle RSS, divided
  by the calls in flight, as docs/benchmarks.md reports it for gunicorn workers (glibc's arenas and
  fragmentation included, which tracemalloc does not see), and ru_maxrss;
- CPU: process CPU time per call, calls made one after another, without tracemalloc.

The response is consumed as a WSGI server does (chunk by chunk, nothing joined). Not a test and not
part of `make bench`; nothing here gates CI. Run from the repository root:

    .venv/bin/python bench/memory_large.py                       # 8 in flight, a temp SQLite, no Redis
    .venv/bin/python bench/memory_large.py --concurrency 16 --rounds 3
    .venv/bin/python bench/memory_large.py --source /tmp/before  # measure another checkout, e.g. the
        # code before a change: mkdir /tmp/before && git archive HEAD | tar -x -C /tmp/before
    .venv/bin/python bench/memory_large.py --image-bytes 0 --cpu-calls 500 --profile /tmp/small.prof
        # small answers: CPU per call, and a cProfile of those calls (python -m pstats /tmp/small.prof)
    DATABASE_URL=postgres://postgres@127.0.0.1:5433/gw_d REDIS_URL=redis://127.0.0.1:6380/4 \\
        .venv/bin/python bench/memory_large.py                   # PostgreSQL + Redis (migrates that DB)

`--json` prints every number as one JSON object at the end. Everything the script starts (the fake
upstream, the temp directory) is removed when it ends.

RSS depends on glibc's allocator as much as on the code: by default every thread may get its own
malloc arena, each keeping the peak of the calls it served. Compare with, e.g.,
`MALLOC_ARENA_MAX=2 .venv/bin/python bench/memory_large.py` (the settings in effect are printed).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import re
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM_KEY = "sk-bench-fake-upstream"  # the fake upstream accepts any key
MODEL = "bench-large"
MB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight at once (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="batches of concurrent calls (default 3)")
    parser.add_argument("--image-bytes", type=int, default=4_000_000, help="PNG size (0: a small PNG)")
    parser.add_argument("--cpu-calls", type=int, default=20, help="sequential calls timed for CPU")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the sequential calls here")
    parser.add_argument("--source", type=Path, default=ROOT, help="checkout to measure (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    args = parser.parse_args(argv)

    source = args.source.resolve()
    workdir = Path(tempfile.mkdtemp(prefix="igw-memory-"))
    upstream = None
    try:
        upstream, port = upstream_start(source=source, image_bytes=args.image_bytes)
        app, key = gateway_setup(source=source, workdir=workdir, upstream_port=port)
        results = _measure(app=app, key=key, args=args)
    finally:
        if upstream is not None:
            upstream.terminate()
            upstream.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    results["source"] = str(source)
    results["malloc_env"] = " ".join(
        f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_")
    )
    _report(results)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


# --- setup ---------------------------------------------------------------------------------------------


def upstream_start(*, source: Path, image_bytes: int) -> tuple[subprocess.Popen, int]:
    argv = [sys.executable, "-m", "bench.upstream", "--port", "0"]
    if image_bytes:
        argv += ["--image-bytes", str(image_bytes)]
    process = subprocess.Popen(argv, cwd=source, stdout=subprocess.PIPE, text=True)  # noqa: S603
    line = process.stdout.readline() if process.stdout else ""
    match = re.match(r"listening on (\d+)", line)
    if not match:
        process.kill()
        raise RuntimeError(f"the fake upstream did not start: {line!r}")
    return process, int(match.group(1))


def gateway_environ(*, workdir: Path) -> dict[str, str]:
    """The environment of a gateway configured like production (DEBUG off). A second process given
    the same environment (keys included) serves the database `gateway_setup` prepared."""
    return {
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings",
        "GATEWAY_ENV_FILE": "",  # never read a developer's .env
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "GATEWAY_KEY_PEPPER": secrets.token_urlsafe(32),
        "MEDIA_ROOT": str(workdir / "media"),
        "BENCH_UPSTREAM_KEY": UPSTREAM_KEY,
        "LOG_LEVEL": "WARNING",
        "DATABASE_URL": os.environ.get("DATABASE_URL") or f"sqlite:///{workdir / 'gateway.sqlite3'}",
    }


def gateway_load(*, source: Path) -> Callable:
    """The WSGI application of `source`, with the environment already set."""
    sys.path.insert(0, str(source))
    os.chdir(source)

    import django

    django.setup()
    from gateway_project.wsgi import application

    return application


def gateway_setup(
    *, source: Path, workdir: Path, upstream_port: int, environ: dict[str, str] | None = None
) -> tuple[Callable, str]:
    """Django configured like production (DEBUG off), migrated, one upstream/model/account/key."""
    os.environ.update(environ or gateway_environ(workdir=workdir))
    gateway_load(source=source)
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    config = workdir / "memory.toml"
    config.write_text(
        f'[[upstreams]]\nname = "{MODEL}"\nkind = "openai"\n'
        f'base_url = "http://127.0.0.1:{upstream_port}/v1"\napi_key_env = "BENCH_UPSTREAM_KEY"\n'
        "timeout_seconds = 60\n\n"
        '[[groups]]\nid = 1\nname = "Bench"\nstatus = "active"\nimage_enabled = true\n'
        'billing = "balance"\nrpm = 0\nconcurrency = 0\n\n'
        f'[[models]]\nid = "{MODEL}"\ngroup = "Bench"\nprice = "0.01"\nupstreams = ["{MODEL}"]\n'
        'sizes = ["1024x1024"]\nmax_n = 1\ndefault_response_format = "b64_json"\n\n'
        '[[accounts]]\nusername = "bench"\nbalance = "1000000000"\nallowed_groups = ["Bench"]\n'
        'current_group = "Bench"\n'
    )
    call_command("loadconfig", str(config), stdout=io.StringIO())
    out = io.StringIO()
    call_command(
        "createapikey", "bench", "--group", "Bench", "--label", "memory", stdout=out, stderr=io.StringIO()
    )
    key = out.getvalue().strip().splitlines()[-1]

    from django.db import connections

    from gateway_project.wsgi import application

    connections.close_all()
    return application, key


# --- one call, and batches of them ---------------------------------------------------------------------

BODY = json.dumps(
    {"model": MODEL, "prompt": "a large image", "n": 1, "size": "1024x1024", "response_format": "b64_json"}
).encode()


def call(app: Callable, key: str, *, path: str = "/v1/images/generations", body: bytes = BODY) -> int:
    """One POST of `body` (JSON) to `path` through the WSGI app; returns the response body's size."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_AUTHORIZATION": f"Bearer {key}",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    status: list[str] = []
    result = app(environ, lambda line, headers, exc_info=None: status.append(line))
    try:
        chunks = list(result)  # references to what a server would write, nothing joined
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()  # request_finished: Django gives its connections back, as under gunicorn
    size = sum(len(chunk) for chunk in chunks)
    if not status or not status[0].startswith("200"):
        raise RuntimeError(f"the gateway answered {status}: {b''.join(chunks)[:500]!r}")
    return size


def _batch(app: Callable, key: str, *, concurrency: int) -> list[int]:
    """`concurrency` calls started together on their own threads."""
    barrier = threading.Barrier(concurrency)
    sizes: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        from django.db import connections

        try:
            barrier.wait()
            sizes.append(call(app, key))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sizes


# --- measuring -----------------------------------------------------------------------------------------


def _measure(*, app: Callable, key: str, args: argparse.Namespace) -> dict[str, Any]:
    n = args.concurrency
    response_bytes = call(app, key)  # warm-up: imports, connections, first-call caches
    call(app, key)
    results: dict[str, Any] = {"response_bytes": response_bytes, "concurrency": n, "rounds": args.rounds}

    # RSS first, while the process has not yet held many bodies at once (glibc keeps freed memory).
    gc.collect()
    idle = _proc_status("VmRSS")
    hwm_reset = _hwm_reset()
    for _ in range(args.rounds):
        _batch(app, key, concurrency=n)
    peak = _proc_status("VmHWM") if hwm_reset else None
    results["rss_idle_mb"] = _mb(idle)
    results["rss_peak_mb"] = _mb(peak)
    results["rss_per_call_mb"] = _mb((peak - idle) / n) if peak is not None and idle is not None else None
    results["ru_maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    profiler = None
    if args.profile:
        import cProfile

        # CPU time: waits on the database or the upstream are not what costs
        profiler = cProfile.Profile(time.process_time)
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    for _ in range(args.cpu_calls):
        call(app, key)
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)
    results["cpu_ms_per_call"] = round((time.process_time() - cpu) * 1000 / args.cpu_calls, 2)
    results["wall_ms_per_call"] = round((time.perf_counter() - wall) * 1000 / args.cpu_calls, 2)

    tracemalloc.start()
    try:
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        call(app, key)
        alone = tracemalloc.get_traced_memory()[1] - base
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(args.rounds):
            _batch(app, key, concurrency=n)
        together = (tracemalloc.get_traced_memory()[1] - base) / n
    finally:
        tracemalloc.stop()
    results["traced_peak_one_call_mb"] = _mb(alone)
    results["traced_peak_one_call_x"] = round(alone / response_bytes, 2)
    results["traced_peak_per_call_mb"] = _mb(together)
    results["traced_peak_per_call_x"] = round(together / response_bytes, 2)
    if results["rss_per_call_mb"] is not None:
        results["rss_per_call_x"] = round(results["rss_per_call_mb"] * MB / response_bytes, 2)
    return results


def _proc_status(field: str) -> int | None:
    """A memory figure of this process from /proc/self/status, in bytes (Linux only)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _hwm_reset() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return True


def _mb(value: float | None) -> float | None:
    return None if value is None else round(value / MB, 1)


def _report(results: dict[str, Any]) -> None:
    size = results["response_bytes"]
    n = results["concurrency"]
    print(f"code under test: {results['source']}")
    if results["malloc_env"]:
        print(f"allocator settings: {results['malloc_env']}")
    print(f"response body: {size:,} bytes ({size / MB:.1f} MB)")
    print(
        f"tracemalloc peak, one call alone: {results['traced_peak_one_call_mb']} MB "
        f"= {results['traced_peak_one_call_x']}x the body"
    )
    print(
        f"tracemalloc peak, {n} in flight x {results['rounds']} rounds: "
        f"{results['traced_peak_per_call_mb']} MB per call = {results['traced_peak_per_call_x']}x the body"
    )
    if results["rss_per_call_mb"] is not None:
        print(
            f"RSS: idle {results['rss_idle_mb']} MB, peak {results['rss_peak_mb']} MB with {n} in flight: "
            f"{results['rss_per_call_mb']} MB per call = {results['rss_per_call_x']}x the body "
            f"(ru_maxrss {results['ru_maxrss_mb']} MB)"
        )
    print(
        f"CPU per call, one after another: {results['cpu_ms_per_call']} ms "
        f"(wall {results['wall_ms_per_call']} ms)"
    )


if __name__ == "__main__":
    sys.exit(main())
