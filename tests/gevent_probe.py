"""Probes run in a fresh interpreter that gevent has patched, as a gunicorn gevent worker is.

The preamble patches the process and counts every gevent poll object made after it (`polls[0]`), so
a probe can show that a wait or a check never goes through gevent's emulation of `select.poll`.
A probe prints one JSON line last; `gevent_probe_run` returns it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.gunicorn_server import ROOT

PREAMBLE = """
from gevent import monkey

monkey.patch_all()

import select

polls = [0]
gevent_poll = select.poll


def counted_poll():
    polls[0] += 1
    return gevent_poll()


select.poll = counted_poll
"""


def gevent_probe_run(probe: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> dict:
    """Run PREAMBLE + `probe` with `args` from the repository root; its last line of output, parsed."""
    run = subprocess.run(
        [sys.executable, "-c", PREAMBLE + probe, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])
