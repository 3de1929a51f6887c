"""core.offload.cpu_bound: CPU work of one call must not stop the other calls of a gevent worker."""

from __future__ import annotations

import threading

from core.offload import cpu_bound
from tests.gevent_probe import gevent_probe_run

# A greenlet ticks every 5 ms while the main greenlet hashes for a few hundred milliseconds, once
# directly and once through cpu_bound; each run reports how many ticks happened meanwhile.
TICKS_WHILE_HASHING = """
import hashlib
import json
import sys
import time

import gevent

from core.offload import cpu_bound

ticks = [0]


def ticker():
    while True:
        ticks[0] += 1
        gevent.sleep(0.005)


def work():
    return hashlib.pbkdf2_hmac("sha256", b"password", b"salt", 400_000)


gevent.spawn(ticker)
gevent.sleep(0.02)
result = {}
for name, run in (("direct", lambda: work()), ("offloaded", lambda: cpu_bound(work))):
    before = ticks[0]
    started = time.perf_counter()
    digest = run()
    result[name] = {"ticks": ticks[0] - before, "seconds": time.perf_counter() - started}
result["same_digest"] = digest == work()
print(json.dumps(result))
"""


def test_it_lets_other_greenlets_run_while_cpu_work_is_offloaded():
    result = gevent_probe_run(TICKS_WHILE_HASHING)

    assert result["same_digest"]
    # Run directly, the hashing holds the event loop: the ticker does not get a turn.
    assert result["direct"]["ticks"] <= 1
    # Offloaded, the ticker keeps getting turns (a tick every 5 ms when the machine is idle; a busy
    # machine slows it, so only "it keeps moving" is asserted, not its pace).
    assert result["offloaded"]["ticks"] >= 5, result


def test_it_runs_the_function_in_the_calling_thread_without_gevent():
    assert cpu_bound(threading.get_ident) == threading.get_ident()


def test_it_raises_what_the_function_raises():
    def fail(message: str) -> None:
        raise ValueError(message)

    try:
        cpu_bound(fail, "no")
    except ValueError as error:
        assert str(error) == "no"
    else:
        raise AssertionError("cpu_bound swallowed the exception")
