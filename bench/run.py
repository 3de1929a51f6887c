#!/usr/bin/env python3
"""The gateway's benchmark suite (`make bench`): its overhead, throughput, slow-upstream and
large-image behaviour under gunicorn on PostgreSQL and Redis, side by side with LiteLLM's proxy.

Everything runs on this machine, on 127.0.0.1 only, and is cleaned up on exit (also on Ctrl-C):

- a throwaway PostgreSQL cluster (initdb in a temp dir, as the `postgres` user when run as root) and
  a Redis server, each on a free port;
- fake OpenAI-compatible upstreams (`python -m bench.upstream`, i.e. tests.fake_upstream): latency 0,
  1 s and 2 s with a
  small PNG, and latency 0 with a ~4 MB PNG;
- the gateway: `migrate`, `loadconfig` of a generated bench config, `createapikey`, then gunicorn with
  `gunicorn.conf.py` and production settings (DEBUG=0, PostgreSQL, Redis);
- the peer: LiteLLM's proxy (installed into bench/.peer-venv from PyPI on first use), 2 workers, no
  database, pointed at the same fake upstreams;
- load from `wrk` (installed with apt-get when missing) with bench/post.lua, bounded in time.

Results go to bench/results/run-<time>.json and are rendered into docs/benchmarks.md between the
`bench:results` markers (the rest of that file is left alone).

    .venv/bin/python bench/run.py               # the full suite (~6 minutes on 2 cores)
    .venv/bin/python bench/run.py --quick       # short runs, for development
    .venv/bin/python bench/run.py --no-peer --only throughput --set GUNICORN_THREADS=64
    .venv/bin/python bench/run.py --only chat-streams-1k --streams 250 --no-doc   # a point of a sweep
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PYTHON = str(ROOT / ".venv" / "bin" / "python")
GUNICORN = str(ROOT / ".venv" / "bin" / "gunicorn")
PEER_VENV = BENCH / ".peer-venv"
RESULTS_DIR = BENCH / "results"
DOC = ROOT / "docs" / "benchmarks.md"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
DB_NAME = "gateway_bench"
UPSTREAM_KEY = "sk-bench-fake-upstream"  # the fake upstream accepts any key
PEER_MASTER_KEY = "sk-bench-peer-master"
LARGE_IMAGE_BYTES = 4_000_000
DOC_START = "<!-- bench:results:start -->"
DOC_END = "<!-- bench:results:end -->"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------------------------------
# Processes: every child starts in its own process group and is stopped on exit, Ctrl-C included.


def signals_hold() -> None:
    """From here on, ignore SIGINT and SIGTERM: the cleanup that follows a first one (stopping every
    server the run started) must not be cut short by a second, as when `timeout` passes on the
    SIGTERM its process group also got."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Processes:
    def __init__(self) -> None:
        self.started: list[tuple[str, subprocess.Popen]] = []
        self.cleanups: list[tuple[str, Any]] = []

    def start(self, name: str, argv: list[str], *, log_path: Path, **kwargs: Any) -> subprocess.Popen:
        handle = open(log_path, "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(  # noqa: S603 - our own fixed commands
            argv,
            stdout=kwargs.pop("stdout", handle),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **kwargs,
        )
        self.started.append((name, process))
        return process

    def on_exit(self, name: str, function: Any) -> None:
        self.cleanups.append((name, function))

    def stop(self, process: subprocess.Popen, timeout: float = 10) -> None:
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
            os.killpg(process.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        # Children that outlived their leader (e.g. multiprocessing workers) share its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)

    def stop_all(self) -> None:
        for process in LOADS:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=5)
        for _name, process in reversed(self.started):
            with contextlib.suppress(Exception):
                self.stop(process)
        for name, function in reversed(self.cleanups):
            try:
                function()
            except Exception as exc:
                log(f"cleanup of {name} failed: {exc}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def run(argv: list[str], **kwargs: Any) -> str:
    result = subprocess.run(argv, check=True, text=True, capture_output=True, **kwargs)  # noqa: S603
    return result.stdout


# --------------------------------------------------------------------------------------------------
# Tools and servers


def ensure_apt(binary: str, package: str) -> str:
    found = shutil.which(binary)
    if found:
        return found
    log(f"{binary} is missing: apt-get install -y {package}")
    install = ["apt-get", "install", "-y", "-q", package]
    if subprocess.run(install, capture_output=True).returncode != 0:  # noqa: S603
        subprocess.run(["apt-get", "update", "-q"], capture_output=True)  # noqa: S607
        subprocess.run(install, check=True, capture_output=True)  # noqa: S603
    found = shutil.which(binary)
    if not found:
        raise RuntimeError(f"{binary} not found after installing {package}")
    return found


def as_postgres(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the `postgres` user then."""
    if os.geteuid() != 0:
        return argv
    return ["su", "postgres", "-s", "/bin/sh", "-c", shlex.join(argv)]


@dataclass
class Postgres:
    port: int
    data: Path
    max_connections: int

    @property
    def url(self) -> str:
        """The gateway's DATABASE_URL: PostgreSQL's Unix socket (in the run's directory, `-k`), as a
        gateway on the database's host connects (docs/deployment.md); the port names the socket."""
        return f"postgres://postgres@{quote(str(self.data.parent), safe='')}:{self.port}/{DB_NAME}"

    def connect(self, dbname: str = "postgres"):
        import psycopg

        return psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}", autocommit=True
        )

    def version(self) -> str:
        with self.connect() as conn:
            return conn.execute("show server_version").fetchone()[0]


def postgres_start(procs: Processes, workdir: Path, *, max_connections: int) -> Postgres:
    if not (PG_BIN / "initdb").exists():
        ensure_apt("psql", "postgresql")
    data = workdir / "pg"
    data.mkdir()
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        for path in (workdir, data):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = free_port()
    run(
        as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]),
        cwd="/",
    )
    options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c max_connections={max_connections}"
    start = [
        str(PG_BIN / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(data / "server.log"),
        "-o",
        options,
        "-w",
        "start",
    ]
    run(as_postgres(start), cwd="/")
    stop = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
    procs.on_exit("postgres", lambda: subprocess.run(as_postgres(stop), cwd="/", capture_output=True))  # noqa: S603
    server = Postgres(port=port, data=data, max_connections=max_connections)
    with server.connect() as conn:
        conn.execute(f"create database {DB_NAME}")
    return server


def redis_start(procs: Processes, workdir: Path) -> str:
    binary = ensure_apt("redis-server", "redis-server")
    port = free_port()
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
    ]
    procs.start("redis", argv, log_path=workdir / "redis.log")
    wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None, "redis")
    return f"redis://127.0.0.1:{port}/0"


def upstream_process_start(procs: Processes, workdir: Path, src: Path, *, name: str, argv: list[str]) -> int:
    """A fake upstream (`argv` with `--port 0`), started from the snapshot; its port, as it prints it."""
    process = procs.start(
        f"upstream {name}", argv, log_path=workdir / f"upstream-{name}.log", cwd=src, stdout=subprocess.PIPE
    )
    line = process.stdout.readline().decode()
    match = re.match(r"listening on (\d+)", line)
    if not match:
        raise RuntimeError(f"fake upstream {name} did not start: {line!r}")
    return int(match.group(1))


def fake_upstream_start(
    procs: Processes, workdir: Path, src: Path, *, name: str, latency: float, image_bytes: int
) -> int:
    argv = [PYTHON, "-m", "bench.upstream", "--port", "0", "--latency", str(latency)]
    if image_bytes:
        argv += ["--image-bytes", str(image_bytes)]
    return upstream_process_start(procs, workdir, src, name=name, argv=argv)


def text_upstream_start(
    procs: Processes, workdir: Path, src: Path, *, name: str, ttft: float, events: int, interval: float
) -> int:
    argv = [
        PYTHON, "-m", "bench.text_upstream", "--port", "0", "--ttft", str(ttft), "--events", str(events),
        "--interval", str(interval),
    ]  # fmt: skip
    return upstream_process_start(procs, workdir, src, name=name, argv=argv)


# --------------------------------------------------------------------------------------------------
# The code under test: a snapshot, so edits made in the working tree during a run cannot disturb it

SNAPSHOT_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", ".peer-venv", "results", "__pycache__", "*.pyc", "media", "staticfiles", "artifacts",
    "db.sqlite3*", ".pytest_cache", ".ruff_cache", ".hypothesis", "*.egg-info", "node_modules",
)  # fmt: skip


def source_snapshot(workdir: Path, *, source: str, overlays: list[str], patches: list[str]) -> Path:
    dest = _source_copy(workdir, source=source, overlays=overlays)
    for patch in patches:  # a change measured before it is made
        subprocess.run(["patch", "-s", "-p1", "-d", str(dest), "-i", str(Path(patch).resolve())], check=True)  # noqa: S603,S607
    return dest


def _source_copy(workdir: Path, *, source: str, overlays: list[str]) -> Path:
    """`worktree`: a copy of the working tree as it is. `head`: the last commit (git archive), plus the
    bench itself, gunicorn.conf.py and any --overlay files from the working tree."""
    dest = workdir / "src"
    if source == "worktree":
        shutil.copytree(ROOT, dest, ignore=SNAPSHOT_IGNORE)
        return dest
    dest.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True)  # noqa: S607
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)  # noqa: S603,S607
    for relative in ["bench", "gunicorn.conf.py", *overlays]:
        source_path = ROOT / relative
        if source_path.is_dir():
            shutil.copytree(source_path, dest / relative, ignore=SNAPSHOT_IGNORE, dirs_exist_ok=True)
        else:
            shutil.copy2(source_path, dest / relative)
    return dest


# --------------------------------------------------------------------------------------------------
# The gateway and the peer

# One upstream and one model per fake upstream, all in one group without limits.
UPSTREAMS = {  # name: (latency seconds, image bytes)
    "fast": (0.0, 0),
    "slow1": (1.0, 0),
    "slow2": (2.0, 0),
    "large": (0.0, LARGE_IMAGE_BYTES),
}


# The text scenarios' fake upstreams (`python -m bench.text_upstream`): one answers at once and streams
# 50 events 10 ms apart; the other streams long answers (first event after 200 ms, 200 events 20 ms
# apart). A non-streamed answer is 50 output tokens (200 for the long one), sent at once.
TEXT_UPSTREAMS = {  # name: (time to first event, events, seconds between events)
    "text0": (0.0, 50, 0.010),
    "textlong": (0.2, 200, 0.020),
    "textreal": (0.3, 50, 0.020),  # a provider's pace: the realistic scenarios (REALISTIC_SCENARIOS)
}
# Text models: (gateway model id, upstream kind, fake upstream). Prices per million tokens.
TEXT_MODELS = {
    "bench-chat": ("openai", "text0"),
    "bench-chat-long": ("openai", "textlong"),
    "bench-claude-long": ("anthropic", "textlong"),
    "bench-chat-real": ("openai", "textreal"),
    # /v1/messages on Chat Completions upstreams, through the gateway's translator (docs/text.md).
    "bench-claude-via-chat": ("openai-compatible", "text0"),
    "bench-claude-via-chat-long": ("openai-compatible", "textlong"),
}
TEXT_PRICES = {"input_price": "2.00", "output_price": "8.00"}
CHAT_PATH, MESSAGES_PATH, IMAGES_PATH = "/v1/chat/completions", "/v1/messages", "/v1/images/generations"
PROMPT = "Write a short note about the benchmark."


def text_body(model: str, *, stream: bool, messages: bool = False) -> str:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
    if messages:
        body["max_tokens"] = 1024
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":"))


def bench_config(ports: dict[str, int]) -> str:
    parts = []
    for name in UPSTREAMS:
        parts.append(
            f'[[upstreams]]\nname = "bench-{name}"\nkind = "openai"\n'
            f'base_url = "http://127.0.0.1:{ports[name]}/v1"\napi_key_env = "BENCH_UPSTREAM_KEY"\n'
            "timeout_seconds = 60\n"
        )
    parts.append(
        '[[groups]]\nid = 1\nname = "Bench"\nstatus = "active"\nimage_enabled = true\n'
        'billing = "balance"\nrpm = 0\nconcurrency = 0\n'
    )
    for name in UPSTREAMS:
        parts.append(
            f'[[models]]\nid = "bench-{name}"\ngroup = "Bench"\nprice = "0.01"\n'
            f'upstreams = ["bench-{name}"]\nsizes = ["1024x1024"]\nmax_n = 1\n'
            'default_response_format = "b64_json"\n'
        )
    for name, (kind, upstream) in TEXT_MODELS.items():
        version_path = "/v1"  # both adapters append their endpoint's path to it
        parts.append(
            f'[[upstreams]]\nname = "{name}-up"\nkind = "{kind}"\n'
            f'base_url = "http://127.0.0.1:{ports[upstream]}{version_path}"\n'
            'api_key_env = "BENCH_UPSTREAM_KEY"\ntimeout_seconds = 60\n'
        )
        parts.append(
            f'[[text_models]]\nid = "{name}"\ngroup = "Bench"\nupstreams = ["{name}-up"]\n'
            + "".join(f'{field} = "{value}"\n' for field, value in TEXT_PRICES.items())
            + "max_output_tokens = 1024\n"
        )
    parts.append(
        '[[accounts]]\nusername = "bench"\nbalance = "1000000000"\nallowed_groups = ["Bench"]\n'
        'current_group = "Bench"\n'
    )
    return "\n".join(parts)


def gateway_env(
    *, pg: Postgres, redis_url: str, port: int, workdir: Path, overrides: dict[str, str]
) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_", "REDIS_", "GUNICORN_", "GATEWAY_", "WEB_CONCURRENCY"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="gateway_project.settings",
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        GATEWAY_KEY_PEPPER=secrets.token_urlsafe(32),
        DATABASE_URL=pg.url,
        REDIS_URL=redis_url,
        ALLOWED_HOSTS="127.0.0.1",
        GATEWAY_BIND=f"127.0.0.1:{port}",
        GATEWAY_PUBLIC_URL=f"http://127.0.0.1:{port}",
        MEDIA_ROOT=str(workdir / "media"),
        BENCH_UPSTREAM_KEY=UPSTREAM_KEY,
        LOG_LEVEL="WARNING",
        MALLOC_ARENA_MAX="2",  # as the Dockerfile and deploy/compose.yaml set it
    )
    env.update(overrides)
    return env


@dataclass
class Target:
    name: str  # gateway | peer | direct
    port: int
    key: str | None
    pid: int | None = None  # root of the process tree to measure


def post_ok(target: Target, model: str, timeout: float = 30) -> bool:
    body = json.dumps(
        {"model": model, "prompt": "warm up", "n": 1, "size": "1024x1024", "response_format": "b64_json"}
    )
    headers = {"Content-Type": "application/json"}
    if target.key:
        headers["Authorization"] = f"Bearer {target.key}"
    request = urllib.request.Request(f"http://127.0.0.1:{target.port}{IMAGES_PATH}", body.encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback
            return response.status == 200
    except urllib.error.HTTPError as exc:
        log(f"{target.name} answered {exc.code}: {exc.read()[:300]!r}")
        return False


def gateway_start(
    procs: Processes, workdir: Path, src: Path, env: dict[str, str], ports: dict[str, int]
) -> Target:
    def manage(*args: str) -> str:
        return run([PYTHON, str(src / "manage.py"), *args], cwd=src, env=env)

    manage("migrate", "--noinput", "-v", "0")
    config = workdir / "bench.toml"
    config.write_text(bench_config(ports))
    manage("loadconfig", str(config))
    key = manage("createapikey", "bench", "--group", "Bench", "--label", "bench").strip().splitlines()[-1]
    return gateway_serve(procs, workdir, src, env, key=key)


def gateway_serve(
    procs: Processes, workdir: Path, src: Path, env: dict[str, str], *, key: str, name: str = "gateway"
) -> Target:
    """gunicorn with the snapshot's gunicorn.conf.py on env's GATEWAY_BIND, once it answers a call."""
    argv = [GUNICORN, "--config", str(src / "gunicorn.conf.py"), "--chdir", str(src), "gateway_project.wsgi"]
    process = procs.start(name, argv, log_path=workdir / "gateway.log", cwd=src, env=env)
    port = int(env["GATEWAY_BIND"].rsplit(":", 1)[1])
    target = Target(name="gateway", port=port, key=key, pid=process.pid)
    wait_for(lambda: post_ok(target, "bench-fast", timeout=5), name, timeout=60)
    return target


def peer_install(python: str) -> str:
    litellm = PEER_VENV / "bin" / "litellm"
    if not litellm.exists():
        log("installing LiteLLM's proxy into bench/.peer-venv (pip install 'litellm[proxy]')")
        subprocess.run([python, "-m", "venv", str(PEER_VENV)], check=True)  # noqa: S603
        pip = [str(PEER_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)  # noqa: S603
        subprocess.run([*pip, "litellm[proxy]"], check=True)  # noqa: S603
    return run(
        [
            str(PEER_VENV / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('litellm'))",
        ]
    ).strip()


def peer_start(procs: Processes, workdir: Path, ports: dict[str, int], *, workers: int) -> Target:
    lines = ["model_list:"]
    for name in ("fast", "slow1"):  # the image models of the scenarios the peer runs
        lines += [
            f"  - model_name: bench-{name}",
            "    litellm_params:",
            f"      model: openai/bench-{name}",
            f"      api_base: http://127.0.0.1:{ports[name]}/v1",
            f"      api_key: {UPSTREAM_KEY}",
            "    model_info:",
            "      mode: image_generation",
        ]
    for name, (kind, upstream) in TEXT_MODELS.items():
        # LiteLLM's OpenAI provider appends /chat/completions to the base; its Anthropic one appends
        # /v1/messages to the origin.
        kind = "openai" if kind == "openai-compatible" else kind  # LiteLLM's name for either
        base = f"http://127.0.0.1:{ports[upstream]}" + ("/v1" if kind == "openai" else "")
        lines += [
            f"  - model_name: {name}",
            "    litellm_params:",
            f"      model: {kind}/{name}",
            f"      api_base: {base}",
            f"      api_key: {UPSTREAM_KEY}",
        ]
    lines += [
        "general_settings:",
        f"  master_key: {PEER_MASTER_KEY}",
        "litellm_settings:",
        "  drop_params: true",
    ]
    config = workdir / "litellm.yaml"
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    argv = [
        str(PEER_VENV / "bin" / "litellm"),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        str(workers),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))}
    env.update(LITELLM_LOG="ERROR", LITELLM_TELEMETRY="False", LITELLM_MODE="PRODUCTION")
    process = procs.start("peer", argv, log_path=workdir / "peer.log", cwd=workdir, env=env)
    target = Target(name="peer", port=port, key=PEER_MASTER_KEY, pid=process.pid)
    wait_for(lambda: post_ok(target, "bench-fast", timeout=5), "LiteLLM's proxy", timeout=180)
    return target


# --------------------------------------------------------------------------------------------------
# Measuring: wrk for the load, /proc and pg_stat_activity for the cost


def proc_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, queue = [], [root]
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def proc_status(pid: int) -> dict[str, int]:
    values = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    values[name] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return values


def proc_cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def reset_peak_rss(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM (Linux >= 4.0)


@dataclass
class Sampler:
    """Samples a process tree's RSS and PostgreSQL's connections while a load runs."""

    root: int | None
    pg: Postgres | None
    interval: float = 0.25
    rss_total_max: int = 0
    rss_worker_max: int = 0
    pg_max: int = 0
    pg_busy_max: int = 0  # connections in a statement or a transaction (not idle in the pool)
    pg_samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        if self.root:
            reset_peak_rss(proc_tree(self.root))
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        if self.root:  # the kernel's peak since reset also catches spikes between samples
            peaks = [proc_status(pid).get("VmHWM", 0) for pid in proc_tree(self.root)[1:]] or [0]
            self.rss_worker_max = max(self.rss_worker_max, *peaks)

    def _loop(self) -> None:
        try:
            conn = self.pg.connect() if self.pg else None
        except Exception as exc:  # e.g. "too many clients": then that is the finding
            log(f"cannot sample PostgreSQL: {exc}")
            conn = None
        try:
            while not self._stop.is_set():
                if self.root:
                    pids = proc_tree(self.root)
                    rss = [proc_status(pid).get("VmRSS", 0) for pid in pids]
                    self.rss_total_max = max(self.rss_total_max, sum(rss))
                    # The first pid is the tree's root (gunicorn's arbiter, LiteLLM's parent).
                    self.rss_worker_max = max(self.rss_worker_max, *(rss[1:] or rss))
                if conn is not None:
                    count, busy = conn.execute(
                        # Client connections only: autovacuum workers also show up under the
                        # database's name while they clean the tables the run writes.
                        "select count(*), count(*) filter (where state <> 'idle') from pg_stat_activity"
                        " where datname = %s and backend_type = 'client backend' and pid <> pg_backend_pid()",
                        (DB_NAME,),
                    ).fetchone()
                    self.pg_max = max(self.pg_max, count)
                    self.pg_busy_max = max(self.pg_busy_max, busy)
                    self.pg_samples.append(count)
                self._stop.wait(self.interval)
        finally:
            if conn is not None:
                conn.close()


LOADS: list[subprocess.Popen] = []


OVERRUN_GRACE_S = 15.0


def load_wait(process: subprocess.Popen, argv: list[str], *, timeout: float) -> dict[str, Any] | None:
    """The BENCH_JSON line a load process prints at its end. A process still running after `timeout`
    (a target too slow to finish its calls in time) is interrupted: it then prints what it measured
    so far, marked `overran`; None when it printed nothing even then."""
    overran = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        overran = True
        log(f"{Path(argv[0]).name} overran its {timeout:.0f} s: interrupted, its unfinished calls are errors")
        process.send_signal(signal.SIGINT)
        try:
            stdout, stderr = process.communicate(timeout=OVERRUN_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
    for line in stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            return dict(json.loads(line.removeprefix("BENCH_JSON ")), overran=overran)
    if overran:
        return None
    raise RuntimeError(f"{argv[0]} printed no result:\n{stdout}\n{stderr}")


def overrun_errors_count(result: dict[str, Any], *, calls: int) -> None:
    """The streams a target did not finish in time (begun or not) are its failures: errors of kind
    `overran`, so that the calls asked for are all answered or errors."""
    unfinished = max(0, calls - result["requests"] - result["errors"])
    result["errors"] += unfinished
    result["errors_by_kind"]["overran"] = result["errors_by_kind"].get("overran", 0) + unfinished


def overrun_result(*, calls: int, streamed: bool) -> dict[str, Any]:
    """The result of a load process that overran and printed nothing: every call an error."""
    nothing = dict.fromkeys(("p50", "p90", "p99"))
    result: dict[str, Any] = {
        "requests": 0, "errors": calls, "rps": 0.0, "overran": True, "duration_s": 0.0, "bytes": 0,
        "p50_ms": None, "p90_ms": None, "p99_ms": None,
    }  # fmt: skip
    if streamed:
        result.update(
            errors_by_kind={"overran": calls}, ttfb_ms=nothing, ttlb_ms=nothing, ttle_ms=nothing,
            gap_ms=dict(nothing, p999=None, max=None), events=0, events_per_s=0.0, streams=0,
            streams_max_open=0, connects=0, interrupted=True,
            samples={"ttfb": [], "ttlb": [], "ttle": [], "gaps": []},
        )  # fmt: skip
    else:
        result.update(
            latency_us=[], max_ms=0.0, mean_ms=0.0, non_2xx=0, connect_errors=0, read_errors=0,
            write_errors=0, timeouts=calls,
        )  # fmt: skip
    return result


def wrk_run(
    wrk: str,
    target: Target,
    scenario: Scenario,
    *,
    connections: int,
    duration: float,
    max_requests: int = 0,
    timeout: float = 30,
    histogram: bool = False,
) -> dict[str, Any]:
    threads = 1 if connections == 1 else 2
    env = dict(
        os.environ,
        BENCH_MODEL=scenario.model,
        BENCH_PATH=scenario.path,
        BENCH_KEY=target.key or "",
        BENCH_BODY=scenario.body or "",
        BENCH_HEADERS="\n".join(scenario.headers),
    )
    if max_requests:
        env["BENCH_MAX_REQUESTS"] = str(max_requests)
    if histogram:
        env["BENCH_HISTOGRAM"] = "1"
    argv = [
        wrk, "-t", str(threads), "-c", str(connections), "-d", f"{int(duration)}s",
        "--timeout", f"{int(timeout)}s", "-s", str(BENCH / "post.lua"), f"http://127.0.0.1:{target.port}",
    ]  # fmt: skip
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # noqa: S603
    LOADS.append(process)  # stopped on exit too
    if max_requests:
        # wrk's main thread sleeps for the whole -d duration even when every thread has stopped;
        # once the load thread is gone (wrk.thread:stop() after max_requests), SIGINT ends the sleep.
        deadline, seen_threads = time.monotonic() + duration + 5, False
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                tasks = len(os.listdir(f"/proc/{process.pid}/task"))
                seen_threads = seen_threads or tasks > 1
                if seen_threads and tasks <= 1:
                    process.send_signal(signal.SIGINT)
                    break
            time.sleep(0.01)
    result = load_wait(process, argv, timeout=duration + timeout + 30)
    if result is None:
        return overrun_result(calls=max_requests, streamed=False)
    result["errors"] = sum(
        result[name] for name in ("non_2xx", "connect_errors", "read_errors", "write_errors", "timeouts")
    )
    return result


def streams_run(
    target: Target, scenario: Scenario, *, requests: int, timeout: float = 120, samples: bool = False
) -> dict[str, Any]:
    """bench/streams.py: `scenario.connections` connections, `requests` streamed calls in all."""
    headers = [*scenario.headers, *([f"Authorization: Bearer {target.key}"] if target.key else [])]
    argv = [
        PYTHON, str(BENCH / "streams.py"), "--port", str(target.port), "--path", scenario.path,
        "--body", scenario.body or "", "--connections", str(scenario.connections),
        "--requests", str(requests), "--ramp", str(scenario.ramp), "--timeout", str(int(timeout)),
        *[part for header in headers for part in ("--header", header)],
    ]  # fmt: skip
    if scenario.events:
        argv += ["--expect-events", str(scenario.events)]
    if samples:
        argv.append("--samples")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # noqa: S603
    LOADS.append(process)
    result = load_wait(process, argv, timeout=scenario.duration + timeout + 60)
    if result is None:
        result = overrun_result(calls=requests, streamed=True)
    elif result["overran"]:
        overrun_errors_count(result, calls=requests)
    # The table's columns: time to the first event is the latency of a streamed call.
    result.update(
        p50_ms=result["ttfb_ms"]["p50"], p90_ms=result["ttfb_ms"]["p90"], p99_ms=result["ttfb_ms"]["p99"]
    )
    return result


@dataclass
class Scenario:
    id: str
    title: str
    model: str  # the model asked for (the peer names its models as the gateway does)
    upstream: str  # the fake upstream the direct target calls
    connections: int
    duration: float  # seconds; with max_requests, an upper bound
    max_requests: int = 0
    targets: tuple[str, ...] = ("direct", "gateway", "peer")
    warmup: float = 0
    path: str = IMAGES_PATH
    body: str | None = None  # None: bench/post.lua's image body
    headers: tuple[str, ...] = ()
    streamed: bool = False  # measured with bench/streams.py instead of wrk
    ramp: float = 0.0  # streamed: seconds over which the connections start
    events: int = 0  # streamed: content events per stream (fewer is an error)
    interval_ms: float = 0.0  # streamed: the upstream's time between events
    rounds: int = 1  # the load split into this many rounds, the targets taking turns in each (ROUNDS)


ANTHROPIC_HEADERS = ("anthropic-version: 2023-06-01",)
# A long stream's length (first event after 0.2 s, then 200 events 20 ms apart). The many-streams
# scenarios start their connections evenly over this time: each connection then runs its streams back
# to back, so the calls in flight reach N with starts spread as in steady traffic (N / 4.2 s), not N
# at one instant.
LONG_STREAM_S = 0.2 + 200 * 0.020
# The realistic stream: a provider's first event after 300 ms, then 50 events 20 ms apart.
REAL_STREAM_S = 0.3 + 50 * 0.020


# The scenarios whose targets are ratios to the peer. Their load is split into rounds, and in each round
# direct, the gateway and the peer take their turn: a slow phase of the VM (its speed varies by ±30 %
# within minutes) then falls on both sides of a ratio instead of on whichever ran during it. Each
# target's row merges its rounds exactly (wrk's latency histograms, the stream client's samples).
RATIO_SCENARIOS = ("overhead", "throughput", "chat-overhead", "chat-throughput", "chat-ttft")
ROUNDS = 4
# The scenarios at a real provider's pace, against which a speed-up that goes past a library's
# documented API must show its gain (docs/architecture.md, "The complexity budget"): an upstream that
# takes 1 s for an image, or 300 ms to a stream's first event.
REALISTIC_SCENARIOS = ("real-image-1", "real-image-64", "real-chat-1", "real-chat-1k")


def scenarios(quick: bool, rounds: int | None = None) -> list[Scenario]:
    rounds = rounds or (2 if quick else ROUNDS)
    scale = 0.2 if quick else 1.0
    chat = text_body("bench-chat", stream=False)
    chat_stream = text_body("bench-chat", stream=True)
    long_chat = text_body("bench-chat-long", stream=True)
    long_messages = text_body("bench-claude-long", stream=True, messages=True)
    ttft_calls = 100 if not quick else 20
    real_chat = text_body("bench-chat-real", stream=True)
    via_chat = text_body("bench-claude-via-chat", stream=True, messages=True)
    via_chat_long = text_body("bench-claude-via-chat-long", stream=True, messages=True)
    real_calls = 30 if not quick else 10
    listing = [
        Scenario("overhead", "1. Overhead: concurrency 1, upstream latency 0", "bench-fast", "fast", 1,
                 120 * scale, max_requests=int(2000 * scale) if not quick else 200, warmup=2 * scale + 1),
        Scenario("throughput", "2. Throughput: concurrency 64, upstream latency 0", "bench-fast", "fast", 64,
                 max(3, 20 * scale), warmup=3 * scale + 1),
        Scenario("slow-1s-256", "3a. Slow upstream: 1 s latency, 256 in flight", "bench-slow1", "slow1", 256,
                 max(5, 30 * scale)),
        Scenario("slow-2s-500", "3b. Slow upstream: 2 s latency, 500 in flight", "bench-slow2", "slow2", 500,
                 max(6, 30 * scale), targets=("gateway",)),
        Scenario("large", "4. Large images: 4 MB b64_json, concurrency 16", "bench-large", "large", 16,
                 max(3, 20 * scale), targets=("direct", "gateway"), warmup=1),
        Scenario("chat-overhead", "5. Chat overhead: concurrency 1, not streamed, upstream latency 0",
                 "bench-chat", "text0", 1, 120 * scale, max_requests=int(2000 * scale) if not quick else 200,
                 warmup=2 * scale + 1, path=CHAT_PATH, body=chat),
        Scenario("chat-throughput", "6. Chat throughput: concurrency 64, not streamed, upstream latency 0",
                 "bench-chat", "text0", 64, max(3, 20 * scale), warmup=3 * scale + 1, path=CHAT_PATH,
                 body=chat),
        Scenario("chat-ttft", "7. Chat streams one at a time: 50 events 10 ms apart, the first at once",
                 "bench-chat", "text0", 1, ttft_calls * 0.5, max_requests=ttft_calls, warmup=1,
                 path=CHAT_PATH, body=chat_stream, streamed=True, events=50, interval_ms=10),
        Scenario("chat-streams-1k", "8. 1,000 chat streams in flight: 200 events 20 ms apart after 200 ms",
                 "bench-chat-long", "textlong", 1000, 3 * LONG_STREAM_S,
                 max_requests=2000 if not quick else 1000, path=CHAT_PATH, body=long_chat, streamed=True,
                 ramp=LONG_STREAM_S, events=200, interval_ms=20),
        Scenario("messages-streams-2k", "9. 2,000 message streams in flight: 200 events 20 ms apart",
                 "bench-claude-long", "textlong", 2000, 3 * LONG_STREAM_S,
                 max_requests=4000 if not quick else 2000, path=MESSAGES_PATH, body=long_messages,
                 headers=ANTHROPIC_HEADERS, streamed=True, ramp=LONG_STREAM_S, events=200, interval_ms=20),
        Scenario("real-image-1", "10. Realistic images: concurrency 1, upstream latency 1 s", "bench-slow1",
                 "slow1", 1, max(6, 20 * scale), warmup=1),
        Scenario("real-image-64", "11. Realistic images: concurrency 64, upstream latency 1 s", "bench-slow1",
                 "slow1", 64, max(6, 20 * scale), warmup=2),
        Scenario("real-chat-1", "12. A realistic stream at a time: first event after 300 ms, 50 events 20 ms "
                 "apart", "bench-chat-real", "textreal", 1, real_calls * REAL_STREAM_S,
                 max_requests=real_calls, warmup=1, path=CHAT_PATH, body=real_chat, streamed=True, events=50,
                 interval_ms=20),
        Scenario("real-chat-1k", "13. 1,000 realistic streams in flight: first event after 300 ms, 50 events "
                 "20 ms apart", "bench-chat-real", "textreal", 1000, 3 * REAL_STREAM_S,
                 max_requests=2000 if not quick else 1000, targets=("direct", "gateway"), path=CHAT_PATH,
                 body=real_chat, streamed=True, ramp=REAL_STREAM_S, events=50, interval_ms=20),
        Scenario("messages-via-chat", "14. /v1/messages on a chat completions upstream, one stream at a "
                 "time: 50 events 10 ms apart, the first at once (against chat-ttft, the native pair)",
                 "bench-claude-via-chat", "text0", 1, ttft_calls * 0.5, max_requests=ttft_calls, warmup=1,
                 targets=("gateway",), path=MESSAGES_PATH, body=via_chat, headers=ANTHROPIC_HEADERS,
                 streamed=True, events=50, interval_ms=10),
        Scenario("messages-via-chat-1k", "15. 1,000 /v1/messages streams on a chat completions upstream: "
                 "200 events 20 ms apart after 200 ms (against chat-streams-1k)",
                 "bench-claude-via-chat-long", "textlong", 1000, 3 * LONG_STREAM_S,
                 max_requests=2000 if not quick else 1000, targets=("gateway",), path=MESSAGES_PATH,
                 body=via_chat_long, headers=ANTHROPIC_HEADERS, streamed=True, ramp=LONG_STREAM_S,
                 events=200, interval_ms=20),
    ]  # fmt: skip
    return [dataclasses.replace(s, rounds=rounds) if s.id in RATIO_SCENARIOS else s for s in listing]


ROUND_REWARM_S = 1.0


def round_part(scenario: Scenario, round_: int) -> Scenario:
    """Round `round_`'s (0, 1, ...) share of a scenario's load (all of it when it has one round). After
    the first round a target warms up again, briefly: the peer was frozen meanwhile."""
    if scenario.rounds <= 1:
        return scenario
    return dataclasses.replace(
        scenario,
        duration=max(2.0, scenario.duration / scenario.rounds),
        max_requests=math.ceil(scenario.max_requests / scenario.rounds) if scenario.max_requests else 0,
        warmup=scenario.warmup if round_ == 0 else min(scenario.warmup, ROUND_REWARM_S),
    )


def peer_freeze(peer: Target, *, frozen: bool) -> None:
    for pid in proc_tree(peer.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def drain(target: Target, timeout: float = 120) -> None:
    """Wait until the target answers a call at once: requests queued by the previous scenario
    (wrk stops, the server still works through its backlog) must not count against the next one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = time.monotonic()
        if post_ok(target, "bench-fast", timeout=timeout) and time.monotonic() - started < 0.5:
            return
        time.sleep(0.5)
    log(f"warning: {target.name} still busy after {timeout} s")


WARMUP_CONNECTIONS = 8


def scenario_run(
    scenario: Scenario,
    target: Target,
    *,
    wrk: str,
    pg: Postgres | None,
    own_roots: list[int],
    gateway_src: Path,
    gateway_env: dict[str, str],
    mergeable: bool = False,
) -> dict[str, Any]:
    """One target's run of a scenario (or of one round's share of it: `round_part`), after the
    scenario's warm-up. `mergeable`: the result carries every latency (samples or a histogram), for
    `rounds_merge`."""
    tree = proc_tree(target.pid) if target.pid else []
    # Worker RSS before this scenario's first call (the warm-up already grows it).
    idle = max([proc_status(pid).get("VmRSS", 0) for pid in tree[1:]] or [0])
    idle_total = sum(proc_status(pid).get("VmRSS", 0) for pid in tree)
    if scenario.warmup:
        # At least 8 connections, so that every worker process serves some of the warm-up: a single
        # connection stays with one worker, and the measured run's may land on another, whose first
        # call (its pool, connections, prepared statements) then counts as a stall. wrk corrects for
        # coordinated omission, so one 300 ms call among 2,000 at concurrency 1 makes a p99 of 200 ms.
        warm = max(scenario.connections, WARMUP_CONNECTIONS)
        if scenario.streamed:
            streams_run(target, dataclasses.replace(scenario, connections=warm), requests=2 * warm)
        else:
            wrk_run(wrk, target, scenario, connections=warm, duration=scenario.warmup)
    gateway = target.name == "gateway"
    charges_before = ledger_charges(pg, scenario.model) if gateway and scenario.streamed and pg else None
    roots = [pid for pid in own_roots if pid]
    cpu_target_before = proc_cpu_seconds(proc_tree(target.pid)) if target.pid else 0.0
    cpu_ours_before = proc_cpu_seconds([p for root in roots for p in proc_tree(root)])
    busy_before = machine_busy_seconds()
    started = time.monotonic()
    with Sampler(root=target.pid, pg=pg if gateway else None) as sampler:
        if scenario.streamed:
            result = streams_run(target, scenario, requests=scenario.max_requests, samples=mergeable)
        else:
            result = wrk_run(
                wrk, target, scenario, connections=scenario.connections, duration=scenario.duration,
                max_requests=scenario.max_requests, histogram=mergeable,
            )  # fmt: skip
    wall = time.monotonic() - started
    cpu_target = (proc_cpu_seconds(proc_tree(target.pid)) - cpu_target_before) if target.pid else None
    # CPU used on the machine by processes this run did not start (a test suite, say): wrk's own
    # time is in neither number, so this is an upper bound that includes wrk.
    busy = machine_busy_seconds() - busy_before
    ours = proc_cpu_seconds([p for root in roots for p in proc_tree(root)]) - cpu_ours_before
    result.update(
        target=target.name,
        rss_total_mb=round(sampler.rss_total_max / 2**20, 1) if target.pid else None,
        rss_total_idle_mb=round(idle_total / 2**20, 1) if target.pid else None,
        rss_worker_peak_mb=round(sampler.rss_worker_max / 2**20, 1) if target.pid else None,
        rss_worker_idle_mb=round(idle / 2**20, 1) if target.pid else None,
        pg_connections_max=sampler.pg_max if gateway else None,
        pg_busy_max=sampler.pg_busy_max if gateway else None,
        cpu_ms_per_request=round(cpu_target * 1000 / max(1, result["requests"]), 3)
        if cpu_target is not None
        else None,
        cpu_cores_used=round(cpu_target / wall, 2) if cpu_target is not None else None,
        other_cpu_cores=round(max(0.0, busy - ours) / wall, 2),
        cpu_s=cpu_target,
        wall_s=wall,
    )
    if charges_before is not None:
        answered = result["requests"]
        result["billing"] = billing_check(
            pg, scenario.model, before=charges_before, answered=answered, src=gateway_src, env=gateway_env
        )
    return result


def nearest_rank(pairs: list[tuple[float, int]], p: float) -> float | None:
    """The nearest-rank percentile `p` of samples given as sorted (value, count) pairs."""
    n = sum(count for _, count in pairs)
    if not n:
        return None
    rank, seen = max(1, math.ceil(p / 100 * n)), 0
    for value, count in pairs:
        seen += count
        if seen >= rank:
            return value
    return pairs[-1][0]


LATENCY_POINTS = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))  # as bench/streams.py reports them
GAP_POINTS = (*LATENCY_POINTS, ("p999", 99.9))


def samples_percentiles(samples: list[float], points: tuple[tuple[str, float], ...]) -> dict[str, Any]:
    pairs = [(value, 1) for value in sorted(samples)]
    return {name: nearest_rank(pairs, p) for name, p in points} | {"max": pairs[-1][0] if pairs else None}


def rounds_merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One target's results of a scenario's rounds as one result: counts and times added up, the
    latency percentiles of all its calls together (exact: from the histograms or samples the rounds
    carry, dropped here), RSS and connections at their most, CPU per call over all calls. `rounds`
    keeps each round's own figures, for the per-round ratios of the report."""

    def total(key: str) -> Any:
        return sum(r[key] for r in results)

    def most(key: str) -> Any:
        return None if results[0][key] is None else max(r[key] for r in results)

    merged = dict(results[0])
    requests, duration, wall = total("requests"), total("duration_s"), total("wall_s")
    merged.update(
        requests=requests,
        duration_s=round(duration, 3),
        rps=round(requests / duration, 2) if duration else 0.0,
        bytes=total("bytes"),
        errors=total("errors"),
        wall_s=wall,
        other_cpu_cores=round(sum(r["other_cpu_cores"] * r["wall_s"] for r in results) / wall, 2),
        **{
            key: most(key)
            for key in ("rss_total_mb", "rss_worker_peak_mb", "pg_connections_max", "pg_busy_max")
        },
    )
    if merged["cpu_s"] is not None:
        cpu = total("cpu_s")
        merged.update(
            cpu_s=cpu,
            cpu_ms_per_request=round(cpu * 1000 / max(1, requests), 3),
            cpu_cores_used=round(cpu / wall, 2),
        )
    if "samples" in merged:  # bench/streams.py
        samples = {name: [v for r in results for v in r["samples"][name]] for name in merged.pop("samples")}
        kinds: dict[str, int] = {}
        for r in results:
            for kind, count in r["errors_by_kind"].items():
                kinds[kind] = kinds.get(kind, 0) + count
        merged.update(
            errors_by_kind=kinds,
            events=total("events"),
            events_per_s=round(total("events") / duration, 1) if duration else 0.0,
            streams=total("streams"),
            streams_max_open=most("streams_max_open"),
            connects=total("connects"),
            interrupted=any(r["interrupted"] for r in results),
            ttfb_ms=samples_percentiles(samples["ttfb"], LATENCY_POINTS),
            ttlb_ms=samples_percentiles(samples["ttlb"], LATENCY_POINTS),
            ttle_ms=samples_percentiles(samples["ttle"], LATENCY_POINTS),
            gap_ms=samples_percentiles(samples["gaps"], GAP_POINTS),
        )
        merged.update(
            p50_ms=merged["ttfb_ms"]["p50"], p90_ms=merged["ttfb_ms"]["p90"], p99_ms=merged["ttfb_ms"]["p99"]
        )
        billings = [r["billing"] for r in results if r.get("billing")]
        if billings:
            merged["billing"] = {
                **{
                    key: sum(b[key] for b in billings)
                    for key in ("streams_answered", "charges", "calls_charged")
                },
                "amount": str(sum(Decimal(b["amount"]) for b in billings)),
                "holds_open": billings[-1]["holds_open"],
                "check_ledger_exit": max(b["check_ledger_exit"] for b in billings),
                "check_ledger": billings[-1]["check_ledger"],
                "exactly_once": all(b["exactly_once"] for b in billings),
            }
    else:  # wrk (bench/post.lua): latencies in microseconds
        counts: dict[int, int] = {}
        for r in results:
            for value, count in r["latency_us"]:
                counts[value] = counts.get(value, 0) + count
        del merged["latency_us"]
        pairs = sorted(counts.items())
        for name, p in LATENCY_POINTS:
            value = nearest_rank(pairs, p)
            merged[f"{name}_ms"] = None if value is None else round(value / 1000, 3)
        merged.update(
            max_ms=max(r["max_ms"] for r in results),
            mean_ms=round(sum(r["mean_ms"] * r["requests"] for r in results) / max(1, requests), 3),
            **{
                key: total(key)
                for key in ("non_2xx", "connect_errors", "read_errors", "write_errors", "timeouts")
            },
        )
    merged["rounds"] = [{"rps": r["rps"], "p50_ms": r["p50_ms"]} for r in results]
    return merged


def ledger_charges(pg: Postgres, model: str) -> dict[str, Any]:
    """The charges of `model`'s calls so far: how many, for how many distinct calls, and their sum."""
    with pg.connect(DB_NAME) as conn:
        count, distinct, total = conn.execute(
            "select count(*), count(distinct e.reference), coalesce(sum(-e.amount), 0)"
            " from billing_ledgerentry e join billing_usagerecord u on u.request_id = e.reference"
            " where e.kind = 'charge' and u.model_id = %s",
            (model,),
        ).fetchone()
    return {"charges": count, "calls_charged": distinct, "amount": str(total)}


def billing_check(
    pg: Postgres, model: str, *, before: dict[str, Any], answered: int, src: Path, env: dict[str, str]
) -> dict[str, Any]:
    """After a streamed scenario: every stream answered in full was charged exactly once, nothing else
    was charged, no hold is left open, and the ledger agrees with every wallet (check_ledger)."""
    time.sleep(1)  # the last usage records are written after the answer's end
    after = ledger_charges(pg, model)
    charges = after["charges"] - before["charges"]
    calls = after["calls_charged"] - before["calls_charged"]
    with pg.connect(DB_NAME) as conn:
        holds_open = conn.execute("select count(*) from billing_hold where status = 'open'").fetchone()[0]
    ledger = subprocess.run(  # noqa: S603
        [PYTHON, str(src / "manage.py"), "check_ledger"], cwd=src, env=env, capture_output=True, text=True,
    )  # fmt: skip
    return {
        "streams_answered": answered,
        "charges": charges,
        "calls_charged": calls,
        "amount": str(Decimal(after["amount"]) - Decimal(before["amount"])),
        "holds_open": holds_open,
        "check_ledger_exit": ledger.returncode,
        "check_ledger": (ledger.stdout + ledger.stderr).strip().splitlines()[-1:],
        "exactly_once": charges == calls == answered and holds_open == 0 and ledger.returncode == 0,
    }


# --------------------------------------------------------------------------------------------------
# The report


def git_state() -> dict[str, Any]:
    """The worktree's commit and whether it has uncommitted changes, read when the code under test is
    copied (source_snapshot): what changes in the worktree during the run is not what was measured."""
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)  # noqa: S607
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return {"git_commit": git.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}


def machine_info(*, git: dict[str, Any]) -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text()
    mem_kb = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))
    cpu = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True)  # noqa: S607
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "cpu": cpu.group(1).strip() if cpu else platform.processor(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        **git,
        "wrk": (wrk_version.stdout + wrk_version.stderr).split("\n")[0].strip(),
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


def gunicorn_settings(src: Path, env: dict[str, str]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__file__": str(src / "gunicorn.conf.py")}
    saved, saved_path = dict(os.environ), list(sys.path)
    try:
        os.environ.clear()
        os.environ.update(env)
        exec((src / "gunicorn.conf.py").read_text(), namespace)  # noqa: S102 - our own config file
    finally:
        os.environ.clear()
        os.environ.update(saved)
        sys.path[:] = saved_path
    names = [
        "workers",
        "worker_class",
        "threads" if namespace.get("worker_class") == "gthread" else "worker_connections",
    ]
    return {name: namespace.get(name) for name in [*names, "keepalive"]}


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def render(report: dict[str, Any]) -> str:
    m, pg = report["machine"], report["postgres"]
    dirty = " with uncommitted changes" if m["git_dirty"] and report["source"] == "worktree" else ""
    overrides = ", ".join(f"{k}={v}" for k, v in report["overrides"].items())
    gunicorn = ", ".join(f"{k}={v}" for k, v in report["gunicorn"].items())
    lines = [
        f"Run of {report['date']} on {m['cores']} cores, {m['memory_gib']} GiB ({m['cpu']}), "
        f"Linux {m['kernel']}, Python {m['python']}; commit `{m['git_commit']}`{dirty}. "
        f"PostgreSQL {pg['version']} (max_connections {pg['max_connections']}), Redis, {m['wrk']}; "
        f"peer: LiteLLM {report.get('peer_version') or '-'} proxy ({report['peer_workers']} workers, "
        f"no database). Load average at start: {' '.join(m['loadavg_at_start'])}.",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Code under test: {report['source']} (a snapshot taken at the start of the run). "
        f"Gateway: gunicorn {gunicorn}"
        + (f"; environment: {overrides}" if overrides else "")
        + "."
        + (
            f" The scenarios compared with the peer ran in {report['rounds']} interleaved rounds; "
            "each row merges a target's rounds."
            if report.get("rounds", 1) > 1
            else ""
        ),
        "",
        "| scenario | target | requests | req/s | p50 ms | p90 ms | p99 ms | errors | RSS total MB | "
        "RSS peak/worker MB | PG conns max | CPU ms/req | other CPU (cores) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    streamed = [item for item in report["scenarios"] if item["results"] and "gap_ms" in item["results"][0]]
    for item in report["scenarios"]:
        if item in streamed:
            continue
        for r in item["results"]:
            cells = [
                item["id"], r["target"], fmt(r["requests"]), fmt(r["rps"]), fmt(r["p50_ms"], 2),
                fmt(r["p90_ms"], 2), fmt(r["p99_ms"], 2), fmt(r["errors"]), fmt(r["rss_total_mb"]),
                fmt(r["rss_worker_peak_mb"]), fmt(r["pg_connections_max"]), fmt(r["cpu_ms_per_request"], 2),
                fmt(r["other_cpu_cores"], 2),
            ]  # fmt: skip
            lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    if streamed:
        lines += [
            "",
            "Streamed scenarios (bench/streams.py; times from sending the request; a gap is the time "
            "between two consecutive events of one stream as the client reads them):",
            "",
            "| scenario | target | streams | errors | events/s | first event p50 / p99 ms | "
            "last event p50 / p99 ms | gap p50 / p99 / max ms | streams open max | RSS idle → peak MB | "
            "RSS per open stream KB | "
            "PG conns max (busy) | CPU ms/stream | other CPU (cores) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for item in streamed:
            for r in item["results"]:
                ttfb, ttlb, gap = r["ttfb_ms"], r.get("ttle_ms") or r["ttlb_ms"], r["gap_ms"]
                per_stream = rss_per_stream_kb(r)
                pg_cell = (
                    f"{r['pg_connections_max']} ({r['pg_busy_max']})"
                    if r.get("pg_connections_max") is not None
                    else "-"
                )
                cells = [
                    item["id"], r["target"], fmt(r["requests"]), fmt(r["errors"]), fmt(r["events_per_s"], 0),
                    f"{fmt(ttfb['p50'], 1)} / {fmt(ttfb['p99'], 1)}",
                    f"{fmt(ttlb['p50'], 1)} / {fmt(ttlb['p99'], 1)}",
                    f"{fmt(gap['p50'], 1)} / {fmt(gap['p99'], 1)} / {fmt(gap['max'], 1)}",
                    fmt(r["streams_max_open"]),
                    (f"{fmt(r['rss_total_idle_mb'])} → {fmt(r['rss_total_mb'])}" if r.get("rss_total_mb")
                     else "-"),
                    fmt(per_stream, 0), pg_cell, fmt(r["cpu_ms_per_request"], 2),
                    fmt(r["other_cpu_cores"], 2),
                ]  # fmt: skip
                lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    lines += ["", "Derived:", ""]
    lines += [f"- {line}" for line in report["derived"]]
    return "\n".join(lines)


MIN_STREAMS_FOR_RSS = 100  # below this, the growth is the process's warm-up, not the streams'


def rss_per_stream_kb(r: dict[str, Any]) -> float | None:
    """The target's memory per open stream: its processes' peak RSS over their RSS before the scenario,
    divided by the most streams open at once; None with fewer than MIN_STREAMS_FOR_RSS open (one
    stream at a time "costs" whatever the process allocated on its first calls)."""
    if not r.get("rss_total_mb") or (r.get("streams_max_open") or 0) < MIN_STREAMS_FOR_RSS:
        return None
    return (r["rss_total_mb"] - r["rss_total_idle_mb"]) * 1024 / r["streams_max_open"]


def added_p50(gateway: dict[str, Any], peer: dict[str, Any], direct: dict[str, Any]) -> float:
    """What the gateway adds to direct's p50 (a streamed scenario's: to its first event), as a
    multiple of what the peer adds; of two rows, or of one round's figures."""
    return (gateway["p50_ms"] - direct["p50_ms"]) / (peer["p50_ms"] - direct["p50_ms"])


def rps_ratio(gateway: dict[str, Any], peer: dict[str, Any], direct: dict[str, Any] | None) -> float:
    """The gateway's requests per second as a multiple of the peer's."""
    return gateway["rps"] / peer["rps"]


def per_round(by: dict[tuple[str, str], dict[str, Any]], sid: str, ratio: Any) -> str:
    """The ratio in each round of a scenario that ran in rounds ("; in its 4 rounds 0.28 to 0.35x
    (median 0.31x)"), or "": `ratio(gateway, peer, direct)` takes one round's figures of each target."""
    rounds = [by.get((sid, name), {}).get("rounds") for name in ("gateway", "peer", "direct")]
    if not rounds[0] or not rounds[1]:
        return ""
    direct = rounds[2] or [None] * len(rounds[0])
    values = sorted(ratio(g, p, d) for g, p, d in zip(rounds[0], rounds[1], direct, strict=True))
    return (
        f"; in its {len(values)} rounds {values[0]:.2f} to {values[-1]:.2f}x "
        f"(median {statistics.median(values):.2f}x)"
    )


def derive_text(report: dict[str, Any], by: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The text scenarios against the targets of the text performance work (docs/benchmarks.md)."""
    out = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    direct = by.get(("chat-overhead", "direct"))
    added = {}
    for name in ("gateway", "peer"):
        r = by.get(("chat-overhead", name))
        if r and direct:
            added[name] = (r["p50_ms"] - direct["p50_ms"], r["p99_ms"] - direct["p99_ms"])
            out.append(
                f"chat-overhead {name}: p50 +{added[name][0]:.2f} ms, "
                f"p99 +{added[name][1]:.2f} ms over direct"
            )
    if len(added) == 2:
        ratio = added["gateway"][0] / added["peer"][0]
        rounds = per_round(by, "chat-overhead", added_p50)
        out.append(
            f"chat-overhead: added p50 gateway/peer = {ratio:.2f}x{rounds} (target ≤ 0.3x): "
            f"{verdict(ratio <= 0.3)}"
        )
    g, p = by.get(("chat-throughput", "gateway")), by.get(("chat-throughput", "peer"))
    if g and p:
        ratio = rps_ratio(g, p, None)
        rounds = per_round(by, "chat-throughput", rps_ratio)
        out.append(
            f"chat-throughput: gateway {g['rps']:.0f} req/s, peer {p['rps']:.0f} req/s = "
            f"{ratio:.2f}x{rounds} (target ≥ 3x): {verdict(ratio >= 3)}"
        )
    direct = by.get(("chat-ttft", "direct"))
    first = {}
    for name in ("gateway", "peer"):
        r = by.get(("chat-ttft", name))
        if r and direct and r["ttfb_ms"]["p50"] is not None:
            first[name] = r["ttfb_ms"]["p50"] - direct["ttfb_ms"]["p50"]
            last = r["ttle_ms"]["p50"] - direct["ttle_ms"]["p50"]
            first99 = r["ttfb_ms"]["p99"] - direct["ttfb_ms"]["p99"]
            held = last <= first[name] + 1
            out.append(
                f"chat-ttft {name}: first event p50 +{first[name]:.2f} ms (p99 +{first99:.2f} ms), "
                "last event "
                f"p50 +{last:.2f} ms over direct: no event held back (last ≤ first + 1 ms): {verdict(held)} "
                f"(end of the body p50 +{r['ttlb_ms']['p50'] - direct['ttlb_ms']['p50']:.2f} ms: the charge)"
            )
    if len(first) == 2 and first["peer"] > 0:
        ratio = first["gateway"] / first["peer"]
        rounds = per_round(by, "chat-ttft", added_p50)
        out.append(
            f"chat-ttft: added first event gateway/peer = {ratio:.2f}x{rounds} (target ≤ 0.3x): "
            f"{verdict(ratio <= 0.3)}"
        )
    scenario_by_id = {s.id: s for s in scenarios(report.get("quick", False))}
    pool = (report["gunicorn"].get("workers") or 1) * int(report.get("db_pool_per_worker") or 16)
    for sid in ("chat-streams-1k", "messages-streams-2k", "real-chat-1k", "messages-via-chat-1k"):
        interval = scenario_by_id[sid].interval_ms
        for name in ("gateway", "peer", "direct"):
            r = by.get((sid, name))
            if not r:
                continue
            gap99 = r["gap_ms"]["p99"]
            if gap99 is None:
                out.append(f"{sid} {name}: {r['errors']} errors, no stream answered ({r['errors_by_kind']})")
                continue
            line = (
                f"{sid} {name}: {r['errors']} errors of {r['requests'] + r['errors']} streams, "
                f"{r['events_per_s']:,.0f} events/s, gap p99 {gap99:.1f} ms against the upstream's "
                f"{interval:.0f} ms (target ≤ {interval + 20:.0f} ms): {verdict(gap99 <= interval + 20)}"
            )
            per_stream = rss_per_stream_kb(r)
            if per_stream is not None and name != "direct":
                line += (
                    f"; {per_stream:.0f} KB RSS per open stream (target ≤ 150): {verdict(per_stream <= 150)}"
                )
            if r.get("pg_connections_max") is not None:
                line += (
                    f"; PostgreSQL connections max {r['pg_connections_max']} (busy {r['pg_busy_max']}) "
                    f"with {r['streams_max_open']} streams open, pool {pool}: "
                    f"{verdict(r['pg_connections_max'] <= pool)}"
                )
            billing = r.get("billing")
            if billing:
                line += (
                    f"; billing: {billing['charges']} charges for {billing['calls_charged']} calls, "
                    f"{billing['streams_answered']} streams answered, {billing['holds_open']} holds open, "
                    f"check_ledger exit {billing['check_ledger_exit']}: "
                    f"exactly once {verdict(billing['exactly_once'])}"
                )
            out.append(line)
    direct, r = by.get(("chat-streams-1k", "direct")), by.get(("chat-streams-1k", "gateway"))
    if direct and r and r["ttfb_ms"]["p99"] is not None and direct["ttfb_ms"]["p99"] is not None:
        late = r["ttfb_ms"]["p99"] - direct["ttfb_ms"]["p99"]
        out.append(
            f"chat-streams-1k: first event p99 {r['ttfb_ms']['p99']:,.1f} ms, {late:+,.1f} ms over direct's "
            f"(target within 1,000 ms, 0 errors): {verdict(late <= 1000 and r['errors'] == 0)}"
        )
    out.extend(_translation_lines(by, verdict=verdict))
    for sid in REALISTIC_SCENARIOS:
        direct = by.get((sid, "direct"))
        for name in ("gateway", "peer"):
            r = by.get((sid, name))
            if r and direct and r["p50_ms"] is not None and direct["p50_ms"] is not None:
                what = "first event p50" if "ttfb_ms" in r else "p50"
                out.append(
                    f"{sid} {name}: {r['rps']:.1f} req/s (direct {direct['rps']:.1f}), "
                    f"{what} +{r['p50_ms'] - direct['p50_ms']:.2f} ms, "
                    f"p99 +{r['p99_ms'] - direct['p99_ms']:.2f} ms over direct, {r['errors']} errors"
                )
    return out


def _translation_lines(
    by: dict[tuple[str, str], dict[str, Any]], *, verdict: Callable[[bool], str]
) -> list[str]:
    """The translated pair against the native one in the same run (issue targets: first event p50 at
    most +1 ms, 0 errors, RSS per open stream within +20 %)."""
    out = []
    native, translated = by.get(("chat-ttft", "gateway")), by.get(("messages-via-chat", "gateway"))
    firsts = [r["ttfb_ms"]["p50"] for r in (native, translated) if r]
    if len(firsts) == 2 and None not in firsts:
        added = firsts[1] - firsts[0]
        assert translated is not None
        out.append(
            f"messages-via-chat: first event p50 {translated['ttfb_ms']['p50']:.2f} ms, {added:+.2f} ms over "
            f"the native chat-ttft's, {translated['errors']} errors (target ≤ +1 ms, 0 errors): "
            f"{verdict(added <= 1 and translated['errors'] == 0)}"
        )
    native, translated = by.get(("chat-streams-1k", "gateway")), by.get(("messages-via-chat-1k", "gateway"))
    if native and translated:
        mine, theirs = rss_per_stream_kb(translated), rss_per_stream_kb(native)
        if mine is not None and theirs:
            out.append(
                f"messages-via-chat-1k: {translated['errors']} errors, {mine:.0f} KB RSS per open stream "
                f"against the native's {theirs:.0f} (target within +20 %, 0 errors): "
                f"{verdict(mine <= 1.2 * theirs and translated['errors'] == 0)}"
            )
    return out


def derive(report: dict[str, Any]) -> list[str]:
    by = {(s["id"], r["target"]): r for s in report["scenarios"] for r in s["results"]}
    out = []
    direct = by.get(("overhead", "direct"))
    for name in ("gateway", "peer"):
        r = by.get(("overhead", name))
        if r and direct:
            p99 = r["p99_ms"] - direct["p99_ms"]
            # A direct p99 above the target's own means the direct run was disturbed (a stall of
            # the machine): say so instead of printing a negative overhead.
            p99_text = (
                f"+{p99:.2f} ms" if p99 >= 0 else f"not measurable (direct's p99 is above the {name}'s)"
            )
            out.append(
                f"overhead of the {name} at concurrency 1: p50 +{r['p50_ms'] - direct['p50_ms']:.2f} ms, "
                f"p99 {p99_text} over direct "
                f"(direct p50 {direct['p50_ms']:.2f} ms, p99 {direct['p99_ms']:.2f} ms; "
                f"{name} p99 {r['p99_ms']:.2f} ms)"
            )
    g, p, d = by.get(("overhead", "gateway")), by.get(("overhead", "peer")), direct
    if g and p and d:
        ratio = added_p50(g, p, d)
        rounds = per_round(by, "overhead", added_p50)
        out.append(
            f"overhead: added p50 gateway/peer = {ratio:.2f}x{rounds} (target ≤ 0.4x): "
            f"{'met' if ratio <= 0.4 else 'NOT met'}"
        )
    g, p = by.get(("throughput", "gateway")), by.get(("throughput", "peer"))
    if g and p:
        ratio = rps_ratio(g, p, None)
        rounds = per_round(by, "throughput", rps_ratio)
        out.append(
            f"throughput at concurrency 64: gateway {g['rps']:.0f} req/s, peer {p['rps']:.0f} req/s: "
            f"{ratio:.2f}x{rounds} (target ≥ 2.5x): {'met' if ratio >= 2.5 else 'NOT met'}"
        )
    for sid, inflight, latency in (("slow-1s-256", 256, 1.0), ("slow-2s-500", 500, 2.0)):
        for name in ("gateway", "peer"):
            r = by.get((sid, name))
            if not r:
                continue
            line = (
                f"{sid} {name}: {r['rps']:.0f} req/s of {inflight / latency:.0f} possible "
                f"({100 * r['rps'] * latency / inflight:.0f} %), {r['errors']} errors"
            )
            if r.get("pg_connections_max") is not None:
                limit = report["postgres"]["max_connections"]
                line += f", PostgreSQL connections max {r['pg_connections_max']} of {limit}"
            out.append(line)
    g = by.get(("large", "gateway"))
    if g and g.get("rss_worker_idle_mb") is not None:
        per_worker = 16 / (report["gunicorn"]["workers"] or 1)
        growth = (g["rss_worker_peak_mb"] - g["rss_worker_idle_mb"]) / per_worker
        body_mb = LARGE_IMAGE_BYTES * 4 / 3 / 2**20  # base64
        out.append(
            f"large: peak RSS per worker {g['rss_worker_peak_mb']:.0f} MB "
            f"(idle {g['rss_worker_idle_mb']:.0f} MB) "
            f"with ~{per_worker:.0f} calls in flight per worker: {growth:.1f} MB per call = "
            f"{growth / body_mb:.1f}x the {body_mb:.1f} MB response"
        )
    return out + derive_text(report, by)


def doc_write(text: str) -> None:
    block = f"{DOC_START}\n{text}\n{DOC_END}"
    if DOC.exists():
        current = DOC.read_text()
        if DOC_START in current and DOC_END in current:
            head, _, rest = current.partition(DOC_START)
            _, _, tail = rest.partition(DOC_END)
            DOC.write_text(head + block + tail)
            return
        DOC.write_text(current.rstrip() + "\n\n## Latest results\n\n" + block + "\n")
        return
    DOC.write_text("# Benchmarks\n\n## Latest results\n\n" + block + "\n")


# --------------------------------------------------------------------------------------------------


def result_line(r: dict[str, Any], *, streamed: bool) -> str:
    """A target's result of a scenario as the run's log shows it."""
    line = (
        f"  {fmt(r['rps'])} req/s, p50 {fmt(r['p50_ms'], 2)} ms, p99 {fmt(r['p99_ms'], 2)} ms, "
        f"errors {r['errors']}, RSS {r['rss_total_mb']} MB, PG {r['pg_connections_max']}, "
        f"other CPU {r['other_cpu_cores']}"
    )
    if streamed:
        line += (
            f", events/s {fmt(r['events_per_s'], 0)}, gap p99 {fmt(r['gap_ms']['p99'], 1)} ms, "
            f"errors by kind {r['errors_by_kind']}, billing {r.get('billing')}"
        )
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (about a fifth), for development")
    parser.add_argument("--no-peer", action="store_true", help="skip LiteLLM's proxy")
    parser.add_argument("--only", action="append", default=[], help="scenario id(s) to run (repeatable)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment for the gateway (repeatable)",
    )
    parser.add_argument(
        "--pg-max-connections", type=int, default=100, help="PostgreSQL's max_connections (its default: 100)"
    )
    parser.add_argument("--peer-workers", type=int, default=2)
    parser.add_argument(
        "--rounds", type=int, metavar="N",
        help=f"rounds of the scenarios compared with the peer ({ROUNDS}; --quick: 2; 1: one run per target)",
    )  # fmt: skip
    parser.add_argument(
        "--streams", type=int, metavar="N",
        help="the many-streams scenarios with N streams in flight and 2N calls (instead of 1,000 or 2,000)",
    )  # fmt: skip
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument(
        "--source", choices=("worktree", "head"), default="worktree",
        help="code under test: a copy of the working tree (default) or of the last commit",
    )  # fmt: skip
    parser.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="PATH",
        help="with --source head: also copy PATH from the working tree",
    )
    parser.add_argument(
        "--patch", action="append", default=[], metavar="FILE", help="apply a patch to the snapshot"
    )
    parser.add_argument(
        "--render", metavar="JSON", help="only rewrite docs/benchmarks.md from a results file"
    )
    parser.add_argument("--serve", action="store_true", help="start everything, print how to reach it, wait")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temp dir with the servers' logs")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    if args.render:
        report = json.loads(Path(args.render).read_text())
        report["derived"] = derive(report)
        doc_write(render(report))
        return 0
    given = argv if argv is not None else sys.argv[1:]
    command = (
        "make bench" + (f" BENCH_ARGS={shlex.quote(shlex.join(given))}" if given else "")
        if os.environ.get("BENCH_VIA_MAKE")
        else shlex.join([".venv/bin/python", "bench/run.py", *given])
    )

    procs = Processes()
    workdir = Path(tempfile.mkdtemp(prefix="igw-bench-"))

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)  # also when started in the background (SIGINT ignored)
    started = time.monotonic()
    try:
        wrk = ensure_apt("wrk", "wrk")
        peer_version = None if args.no_peer else peer_install(sys.executable)
        log(f"workdir {workdir}")
        pg = postgres_start(procs, workdir, max_connections=args.pg_max_connections)
        redis_url = redis_start(procs, workdir)
        git = git_state()
        src = source_snapshot(workdir, source=args.source, overlays=args.overlay, patches=args.patch)
        ports = {
            name: fake_upstream_start(procs, workdir, src, name=name, latency=latency, image_bytes=size)
            for name, (latency, size) in UPSTREAMS.items()
        }
        for name, (ttft, events, interval) in TEXT_UPSTREAMS.items():
            ports[name] = text_upstream_start(
                procs, workdir, src, name=name, ttft=ttft, events=events, interval=interval
            )
        upstream_pids = [process.pid for name, process in procs.started if name.startswith("upstream")]
        env = gateway_env(pg=pg, redis_url=redis_url, port=free_port(), workdir=workdir, overrides=overrides)
        gateway = gateway_start(procs, workdir, src, env, ports)
        log(f"gateway up on :{gateway.port} (postgres :{pg.port}, {redis_url})")
        peer = None if args.no_peer else peer_start(procs, workdir, ports, workers=args.peer_workers)
        direct = {name: Target(name="direct", port=port, key=None) for name, port in ports.items()}
        if args.serve:
            print(
                f"gateway http://127.0.0.1:{gateway.port} key {gateway.key} (pid {gateway.pid})\n"
                f"peer {peer.port if peer else '-'} key {PEER_MASTER_KEY}\nupstreams {ports}\n"
                f"postgres {pg.url}\nCtrl-C stops everything",
                flush=True,
            )
            while True:
                time.sleep(3600)
        pg_pid = int((pg.data / "postmaster.pid").read_text().split()[0])
        own_roots = [gateway.pid, pg_pid, *upstream_pids, peer.pid if peer else None] + [
            process.pid for name, process in procs.started if name == "redis"
        ]
        report: dict[str, Any] = {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command,
            "machine": machine_info(git=git),
            "postgres": {"version": pg.version(), "max_connections": pg.max_connections},
            "peer_version": peer_version,
            "peer_workers": args.peer_workers,
            "gunicorn": gunicorn_settings(src, env),
            "source": args.source
            + "".join(f" + {path}" for path in args.overlay if args.source == "head")
            + "".join(f", patched with {path}" for path in args.patch),
            "overrides": overrides,
            "quick": args.quick,
            "db_pool_per_worker": int(env.get("DATABASE_POOL_MAX_SIZE", "16")),
            "rounds": args.rounds or (2 if args.quick else ROUNDS),
            "scenarios": [],
        }
        for scenario in scenarios(args.quick, args.rounds):
            if args.only and scenario.id not in args.only:
                continue
            if args.streams and scenario.streamed and scenario.connections > 1:
                scenario = dataclasses.replace(
                    scenario,
                    connections=args.streams,
                    max_requests=2 * args.streams,
                    title=f"{scenario.title} (here {args.streams:,})",
                )
            item = {"id": scenario.id, "title": scenario.title, "results": [], "rounds": scenario.rounds}
            names = [name for name in scenario.targets if name != "peer" or peer is not None]
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for round_ in range(scenario.rounds):
                for name in names:
                    target = {"direct": direct[scenario.upstream], "gateway": gateway, "peer": peer}[name]
                    if peer is not None:
                        # LiteLLM's idle processes use CPU (~0.4 core here): frozen unless measured.
                        peer_freeze(peer, frozen=name != "peer")
                    if name != "direct":
                        drain(target)
                    of = f", round {round_ + 1} of {scenario.rounds}" if scenario.rounds > 1 else ""
                    log(f"{scenario.id}: {name}, {scenario.connections} connections{of}")
                    result = scenario_run(
                        round_part(scenario, round_), target, wrk=wrk, pg=pg, own_roots=own_roots,
                        gateway_src=src, gateway_env=env, mergeable=scenario.rounds > 1,
                    )  # fmt: skip
                    log(result_line(result, streamed=scenario.streamed))
                    runs[name].append(result)
            for name in names:
                item["results"].append(rounds_merge(runs[name]) if scenario.rounds > 1 else runs[name][0])
            report["scenarios"].append(item)
        report["derived"] = derive(report)
        report["elapsed_s"] = round(time.monotonic() - started)
        RESULTS_DIR.mkdir(exist_ok=True)
        out = RESULTS_DIR / f"run-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(json.dumps(report, indent=2) + "\n")
        text = render(report)
        print("\n" + text + "\n")
        log(f"results: {out.relative_to(ROOT)} ({report['elapsed_s']} s)")
        if not args.no_doc:
            doc_write(text)
            shutil.copy(out, BENCH / "last-run.json")
            log(f"updated {DOC.relative_to(ROOT)} and bench/last-run.json")
        return 0
    except KeyboardInterrupt:
        log("interrupted: stopping everything")
        return 130
    finally:
        signals_hold()
        procs.stop_all()
        if args.keep_logs:
            log(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
