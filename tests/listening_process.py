"""A helper process of the tests: `python -m <module> --port 0 ...` from the project root, which prints
`listening on <port>` as its first line once it accepts connections."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def listening_process(module: str, *args: str) -> Iterator[int]:
    """Start `module` on a free port; yield that port; stop the process on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"{module} did not start: {line!r}")
        yield int(line.split()[-1])
    finally:
        process_stop(process)


def process_stop(process: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
