"""gunicorn's control socket is one per gateway instance (gunicorn.conf.py): two gateways on one host,
run by one user, each answer `gunicornc` on a socket of their own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.gunicorn_server import gunicorn_serving

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the server shares the test database: needs PostgreSQL"
    ),
    pytest.mark.django_db(transaction=True),
]


def _listeners(socket: Path) -> list[str]:
    gunicornc = Path(sys.executable).with_name("gunicornc")
    answer = subprocess.run(
        [str(gunicornc), "-s", str(socket), "-c", "show listeners", "-j"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return [listener["address"] for listener in json.loads(answer.stdout)["listeners"]]


def test_two_gateways_on_one_host_each_have_their_own_control_socket(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir()
    env = {"XDG_RUNTIME_DIR": str(runtime), "WEB_CONCURRENCY": "1"}
    with (
        gunicorn_serving(log_path=tmp_path / "a.log", env=env) as first,
        gunicorn_serving(log_path=tmp_path / "b.log", env=env) as second,
    ):
        sockets = sorted(runtime.rglob("*.ctl"))
        answers = sorted(address for socket in sockets for address in _listeners(socket))
        private = [socket.stat().st_mode & 0o077 == 0 for socket in sockets]

    assert len(sockets) == 2, sockets
    assert answers == sorted([first, second])
    assert all(private)
