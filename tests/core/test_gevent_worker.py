"""The gateway's gevent worker accepts new connections in bursts (core/gevent_worker.py), and what it
relies on in gunicorn still holds: gunicorn builds its servers from its module's `StreamServer` and
lowers their `max_accept` to 1 when it runs more than one worker."""

from __future__ import annotations

import gc
import inspect
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from gevent.server import StreamServer
from gunicorn.workers import ggevent

from core.gevent_worker import ACCEPTS_PER_WAKE, BurstAcceptingServer

ROOT = Path(__file__).resolve().parents[2]


def servers_app(environ, start_response):
    """A WSGI app answering the `max_accept` of every gevent server in the worker serving it."""
    body = json.dumps([o.max_accept for o in gc.get_objects() if isinstance(o, StreamServer)]).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


@contextmanager
def _serving(worker_class: str, tmp_path: Path) -> Iterator[str]:
    # Imported here: gunicorn loads this module as its app, before Django is set up.
    from tests.gunicorn_server import gunicorn_stop

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "gunicorn.conf.py"  # not the gateway's: the app here is the one above
    config.write_text("control_socket_disable = True\n")
    argv = [
        sys.executable, "-m", "gunicorn", "--config", str(config), "--worker-class", worker_class,
        "--workers", "2", "--bind", f"127.0.0.1:{port}", "tests.core.test_gevent_worker:servers_app",
    ]  # fmt: skip
    with (tmp_path / f"{worker_class}.log").open("wb") as log:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=os.environ, stdout=log, stderr=log, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp_path / f"{worker_class}.log").read_text()
            try:
                requests.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "gunicorn did not answer"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/"
    finally:
        gunicorn_stop(process, timeout=10)


def test_the_gateway_worker_accepts_in_bursts_where_gunicorns_accepts_one_at_a_time(tmp_path):
    with _serving("core.gevent_worker.GeventWorker", tmp_path) as url:
        answers = {tuple(requests.get(url, timeout=5).json()) for _ in range(10)}
    assert answers == {(ACCEPTS_PER_WAKE,)}
    # gunicorn's own worker, with more than one worker, accepts one connection per wake: the reason
    # for the gateway's (remove it if this fails on a newer gunicorn).
    with _serving("gevent", tmp_path) as url:
        answers = {tuple(requests.get(url, timeout=5).json()) for _ in range(10)}
    assert answers == {(1,)}


def test_gunicorn_builds_its_servers_from_the_module_global_and_then_lowers_max_accept():
    source = inspect.getsource(ggevent.GeventWorker.run)
    assert "StreamServer(" in source
    assert "max_accept = 1" in source


def test_an_assigned_max_accept_leaves_the_burst_as_it_is():
    server = BurstAcceptingServer(("127.0.0.1", 0), handle=lambda sock, address: None)
    try:
        server.max_accept = 1
        assert server.max_accept == ACCEPTS_PER_WAKE
    finally:
        server.close()
