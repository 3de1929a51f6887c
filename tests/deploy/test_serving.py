"""The production server as deployed: gunicorn with gunicorn.conf.py, which on PostgreSQL runs gevent
workers (every call a greenlet of one thread). These tests prove what that choice must not break:
calls of one worker run side by side, each on its own database connection and transaction, a call
waiting on its upstream holds no connection, and money stays exact when calls interleave.

PostgreSQL only: the server is another process on the test database.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import openai
import psycopg
import pytest
import requests
from django.db import connection

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from keys.services import api_key_create
from tests.factories import image_model_make
from tests.gunicorn_server import gunicorn_serving, shared_database_url

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]

GEN = "/v1/images/generations"
APPLICATION = "gateway-under-test"  # PostgreSQL's application_name for the server's connections
POOL = 3  # database connections the server's one worker may hold
UPSTREAM_SECONDS = 0.5  # every scripted upstream answer waits this long


@pytest.fixture
def model(alpha_group, fake_upstream_make):
    upstream = fake_upstream_make("fake-openai")
    image_model_make(
        model_id="alpha-fake-stream", group=alpha_group, upstreams=[upstream], stream_supported=True
    )
    return image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[upstream], price="0.25")


@pytest.fixture
def server(model, tmp_path):
    """One gevent worker with a pool of POOL connections; returns (base URL, the server's log)."""
    log = tmp_path / "gunicorn.log"
    env = {
        "DATABASE_URL": shared_database_url(application_name=APPLICATION),
        "DATABASE_POOL_MAX_SIZE": str(POOL),
        "GUNICORN_WORKER_CLASS": "",  # the default of gunicorn.conf.py
    }
    with gunicorn_serving(log_path=log, env=env) as base_url:
        yield base_url, log


class ConnectionSampler:
    """Counts the server's PostgreSQL connections, and how many are busy, every few milliseconds."""

    def __init__(self) -> None:
        self.most_open = 0
        self.most_busy = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        db = connection.settings_dict
        params = {"host": db["HOST"], "port": db["PORT"] or None, "user": db["USER"]}
        with psycopg.connect(**params, password=db["PASSWORD"], dbname="postgres") as conn:
            conn.autocommit = True
            while not self._stop.is_set():
                opened, busy = conn.execute(
                    "select count(*), count(*) filter (where state <> 'idle')"
                    " from pg_stat_activity where application_name = %s",
                    (APPLICATION,),
                ).fetchone()
                self.most_open = max(self.most_open, opened)
                self.most_busy = max(self.most_busy, busy)
                self._stop.wait(0.005)


def calls_at_once(base_url: str, key: str, count: int) -> list[requests.Response]:
    def call(index: int) -> requests.Response:
        return requests.post(
            f"{base_url}{GEN}",
            json={"model": "alpha-fake", "prompt": f"call {index}"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(call, range(count)))


def most_in_flight_upstream(fake_upstream) -> int:
    """The most requests the fake upstream held at once (each for UPSTREAM_SECONDS after it arrived)."""
    arrivals = sorted(r["received_at"] for r in fake_upstream.requests() if r["path"] == GEN)
    return max(sum(1 for a in arrivals if t - UPSTREAM_SECONDS < a <= t) for t in arrivals)


def test_it_runs_a_workers_calls_side_by_side_on_few_connections_and_charges_each_once(
    server, fake_upstream, alice
):
    base_url, log = server
    key = api_key_create(account=alice, group=alice.current_group, label="serving")[1]
    calls = 24
    fake_upstream.script(GEN, *[{"delay": UPSTREAM_SECONDS}] * calls)

    with ConnectionSampler() as sampler:
        responses = calls_at_once(base_url, key, calls)

    assert [r.status_code for r in responses] == [200] * calls, responses[0].text
    assert all(r.json()["data"][0]["b64_json"] for r in responses)
    # One process held the calls at once: a worker that served them one by one would have had one
    # request at the upstream at a time.
    assert most_in_flight_upstream(fake_upstream) >= calls // 2
    assert "Using worker: core.gevent_worker.GeventWorker" in log.read_text()
    # ... on at most its pool's connections, none of them held while the calls waited upstream.
    assert 0 < sampler.most_open <= POOL
    wallet = Wallet.objects.get(account=alice)
    assert wallet.balance == Decimal("10") - calls * Decimal("0.25")
    assert wallet.held == Decimal("0")
    assert LedgerEntry.objects.filter(wallet=wallet, kind="charge").count() == calls
    assert UsageRecord.objects.filter(status=200, amount=Decimal("0.25")).count() == calls
    assert not Hold.objects.filter(status="open").exists()


def test_it_charges_only_the_calls_that_succeed_when_failures_interleave_with_them(
    server, fake_upstream, alice
):
    base_url, _ = server
    key = api_key_create(account=alice, group=alice.current_group, label="serving")[1]
    refused = {
        "delay": UPSTREAM_SECONDS,
        "status": 400,
        "json": {"error": {"message": "Your prompt was rejected.", "type": "invalid_request_error"}},
    }
    fake_upstream.script(GEN, *[{"delay": UPSTREAM_SECONDS}, refused] * 8)

    responses = calls_at_once(base_url, key, 16)

    assert sorted(r.status_code for r in responses) == [200] * 8 + [400] * 8
    wallet = Wallet.objects.get(account=alice)
    assert wallet.balance == Decimal("10") - 8 * Decimal("0.25")
    assert wallet.held == Decimal("0")
    assert LedgerEntry.objects.filter(wallet=wallet, kind="charge").count() == 8
    assert UsageRecord.objects.filter(status=200, amount=Decimal("0.25")).count() == 8
    assert UsageRecord.objects.filter(status=400, amount=Decimal("0")).count() == 8
    assert set(Hold.objects.values_list("status", flat=True)) == {"captured", "released"}


def test_it_streams_events_with_the_official_sdk_while_other_calls_run_and_charges_once(
    server, fake_upstream, alice
):
    base_url, _ = server
    key = api_key_create(account=alice, group=alice.current_group, label="serving")[1]
    sdk = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)

    with ThreadPoolExecutor(max_workers=1) as pool:
        # The stream is answered at once (3 partial images 0.05 s apart); four plain calls go through
        # the same worker meanwhile.
        fake_upstream.script(GEN, {}, *[{"delay": 0.2}] * 4)
        stream = sdk.images.generate(model="alpha-fake-stream", prompt="x", stream=True, partial_images=3)
        others = pool.submit(calls_at_once, base_url, key, 4)
        events = [event.type for event in stream]

    assert events == ["image_generation.partial_image"] * 3 + ["image_generation.completed"]
    assert [r.status_code for r in others.result()] == [200] * 4
    wallet = Wallet.objects.get(account=alice)
    # The stream's model costs 0.02, the others 0.25 each: every call charged once.
    assert wallet.balance == Decimal("10") - Decimal("0.02") - 4 * Decimal("0.25")
    assert wallet.held == Decimal("0")
    assert LedgerEntry.objects.filter(wallet=wallet, kind="charge").count() == 5
    assert not Hold.objects.filter(status="open").exists()
