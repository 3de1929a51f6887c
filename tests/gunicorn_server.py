"""The gateway served the way it is deployed: gunicorn with gunicorn.conf.py, in its own process, on
the test database. Needs a database both processes share, so callers run on PostgreSQL only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def shared_database_url(**query: str) -> str:
    """The URL of the test database this process uses, with optional connection options."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def gunicorn_serving(*, log_path: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """Serve the gateway with gunicorn.conf.py until the block ends; yields its base URL once it
    answers. `env` adds to (or overrides) this process's environment."""
    port = _free_port()
    full_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test",
        "DATABASE_URL": shared_database_url(),
        "GATEWAY_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "1",
        "GUNICORN_ACCESSLOG": os.devnull,
        **(env or {}),
    }
    with log_path.open("wb") as stderr:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", "gateway_project.wsgi"],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its workers in one process group, to kill if the stop hangs
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {log_path.read_text()[-2000:]}")
            try:
                requests.get(f"{base_url}/v1/models", timeout=5)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield base_url
    finally:
        gunicorn_stop(process)


def gunicorn_stop(process: subprocess.Popen[bytes], *, timeout: float = 15) -> None:
    """Stop a gunicorn started in a session of its own (`start_new_session=True`): SIGTERM, and its
    whole process group killed if it outlives `timeout`. A worker still starting when the master
    passes the signal on misses it (its handlers are not set yet), and the master would wait its
    graceful timeout for it."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)


def gunicorn_worker_pids(base_url: str) -> list[int]:
    """The workers of the gunicorn this test process started on `base_url`: the processes with its
    GATEWAY_BIND whose parent is that master."""
    port = base_url.rsplit(":", 1)[1]
    master = None
    processes: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if f"GATEWAY_BIND=127.0.0.1:{port}".encode() not in environ:
            continue
        processes[int(entry.name)] = ppid
        if ppid == os.getpid():
            master = int(entry.name)
    return [pid for pid, ppid in processes.items() if ppid == master]
