"""Faults injected into a running gateway under load (docs/failure-modes.md): Redis stopped and
started again, every PostgreSQL backend of the test database terminated (as a server restart does to
its clients), one gunicorn worker killed with SIGKILL.

Real processes on loopback: gunicorn (two gevent workers) on the test database, a redis-server of
this module's own (the shared one is never stopped) and the fake upstream. Each test drives a bounded
load of billed image calls (a group with rpm and concurrency limits, a third of the calls with an
Idempotency-Key, retried once with it when not answered 200), injects its fault mid-load, and then
checks the money: every 200 charged exactly once, no call answered otherwise charged, the ledger's
invariants, no hold left open once `holds_release_stale` has run as an operator's cron would, no
concurrency slot living past its lease; and that the gateway answers normally again without a
restart.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import redis
import requests
from django.conf import settings
from django.db import connection
from django.utils import timezone

from billing.holds import holds_release_stale
from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry
from billing.selectors import ledger_check
from core.db import database_reconnect
from keys.services import api_key_create
from tests.factories import alpha_group_make, image_model_make
from tests.gunicorn_server import gunicorn_serving
from tests.postgres_backends import backends_terminate
from tests.redis_process import redis_process

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]

GEN = "/v1/images/generations"
CALLS = 120
THREADS = 6
UPSTREAM_SECONDS = 0.05
SLOT_TTL = 30  # the gateway's GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS in these tests


@pytest.fixture
def alpha_group(db):
    return alpha_group_make(rpm=10_000, concurrency=THREADS + 2)


@dataclass
class Gateway:
    base_url: str
    redis: object
    key: str
    log: Path

    def worker_pids(self) -> list[int]:
        """The gunicorn workers: processes whose parent is the master this test process started."""
        port = self.base_url.rsplit(":", 1)[1]
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


@pytest.fixture
def gateway(alice, alpha_group, fake_upstream_make, fake_upstream, tmp_path):
    wallet_top_up(account=alice, amount="1000.00", reference="load")
    upstream = fake_upstream_make("fake-openai")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[upstream], price="0.25")
    key = api_key_create(account=alice, group=alpha_group, label="faults")[1]
    fake_upstream.script(GEN, *[{"delay": UPSTREAM_SECONDS}] * (3 * CALLS))
    with redis_process() as server:
        env = {
            "REDIS_URL": server.url,
            "WEB_CONCURRENCY": "2",
            "GUNICORN_WORKER_CLASS": "",  # gevent, as deployed on PostgreSQL
            "DATABASE_POOL_MAX_SIZE": "4",
            "GATEWAY_REDIS_RETRY_SECONDS": "0.5",
            "GATEWAY_CONCURRENCY_SLOT_TTL_SECONDS": str(SLOT_TTL),
            "GATEWAY_RETRY_MAX": "0",  # one upstream attempt per call: the load stays bounded
        }
        log = tmp_path / "gunicorn.log"
        with gunicorn_serving(log_path=log, env=env) as base_url:
            yield Gateway(base_url=base_url, redis=server, key=key, log=log)


@dataclass
class Answer:
    request_id: str
    status: int | None  # None: no answer (the connection broke)
    replayed: bool


def call(gateway: Gateway, request_id: str, idempotency_key: str | None, prompt: str = "x") -> Answer:
    headers = {"Authorization": f"Bearer {gateway.key}", "X-Request-Id": request_id}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    try:
        response = requests.post(
            f"{gateway.base_url}{GEN}",
            json={"model": "alpha-fake", "prompt": prompt},
            headers=headers,
            timeout=20,
        )
    except requests.RequestException:
        return Answer(request_id=request_id, status=None, replayed=False)
    return Answer(
        request_id=request_id,
        status=response.status_code,
        replayed=response.headers.get("Idempotent-Replayed") == "true",
    )


def load(gateway: Gateway, name: str, fault: Callable[[], None]) -> list[Answer]:
    """CALLS calls over THREADS threads; `fault()` runs once a third of them have been answered."""
    answers: list[Answer] = []
    lock = threading.Lock()
    third = threading.Event()

    def one(index: int) -> None:
        keyed = index % 3 == 0
        key, prompt = (f"{name}-{index}" if keyed else None), f"call {index}"
        first = call(gateway, f"fi-{name}-{index}-a", key, prompt)
        got = [first]
        if keyed and first.status != 200:
            time.sleep(0.2)
            got.append(call(gateway, f"fi-{name}-{index}-b", key, prompt))
        with lock:
            answers.extend(got)
            if len(answers) >= CALLS // 3:
                third.set()

    injector = threading.Thread(target=lambda: (third.wait(30), fault()))
    injector.start()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        list(pool.map(one, range(CALLS)))
    injector.join()
    return answers


def assert_recovers(gateway: Gateway, name: str) -> None:
    """Without a restart, the gateway answers 200 again (within a few seconds) and then keeps on."""
    deadline = time.monotonic() + 15
    index = 0
    while call(gateway, f"fi-{name}-after-{index}", None).status != 200:
        assert time.monotonic() < deadline, gateway.log.read_text()[-3000:]
        index += 1
        time.sleep(0.2)
    after = [call(gateway, f"fi-{name}-steady-{i}", None).status for i in range(5)]
    assert after == [200] * 5, gateway.log.read_text()[-3000:]


def assert_money_exact(gateway: Gateway, answers: list[Answer]) -> None:
    charged = Counter(
        LedgerEntry.objects.filter(kind="charge", reference__startswith="fi-").values_list(
            "reference", flat=True
        )
    )
    assert all(count == 1 for count in charged.values()), [r for r, c in charged.items() if c > 1]
    assert not [a for a in answers if a.status == 422]  # a keyed retry is the same request
    for answer in answers:
        if answer.status == 200 and not answer.replayed:
            assert charged[answer.request_id] == 1, answer
        elif answer.status is not None:
            # Answered with an error (or a replay of a call charged under its first request id).
            assert charged[answer.request_id] == 0, answer
    unanswered = {a.request_id for a in answers if a.status is None}
    successes = {a.request_id for a in answers if a.status == 200 and not a.replayed}
    recovery = {r for r in charged if "-after-" in r or "-steady-" in r}
    assert set(charged) - successes - recovery <= unanswered
    # An operator's cron after the hold TTL: every hold of a dead call is released.
    holds_release_stale(now=timezone.now() + timedelta(seconds=settings.GATEWAY_HOLD_TTL_SECONDS + 1))
    assert not Hold.objects.filter(status="open").exists()
    assert ledger_check() == []
    # No concurrency slot outlives its lease (the gateway gave back every slot it could).
    direct = redis.Redis.from_url(gateway.redis.url)
    for name in direct.keys("*concurrency*"):
        assert 0 < direct.ttl(name) <= SLOT_TTL


def test_it_keeps_money_exact_when_redis_stops_mid_load_and_comes_back(gateway):
    def fault() -> None:
        gateway.redis.stop()
        time.sleep(1.0)
        gateway.redis.start()

    answers = load(gateway, "redis", fault)

    assert Counter(a.status for a in answers)[200] > CALLS // 3
    assert_recovers(gateway, "redis")
    assert_money_exact(gateway, answers)
    assert "gateway degraded" in gateway.log.read_text()
    assert "gateway recovered" in gateway.log.read_text()


def test_it_keeps_money_exact_when_every_database_backend_is_terminated_mid_load(gateway):
    answers = load(gateway, "postgres", backends_terminate)
    database_reconnect()  # this process's own connections were terminated too

    assert Counter(a.status for a in answers)[200] > CALLS // 3
    assert_recovers(gateway, "postgres")
    assert_money_exact(gateway, answers)


def test_it_keeps_money_exact_when_a_worker_is_killed_mid_load(gateway):
    victims: list[int] = []

    def fault() -> None:
        victims.append(gateway.worker_pids()[0])
        os.kill(victims[0], signal.SIGKILL)

    answers = load(gateway, "kill", fault)

    assert victims
    assert Counter(a.status for a in answers)[200] > CALLS // 3
    assert_recovers(gateway, "kill")
    assert_money_exact(gateway, answers)
