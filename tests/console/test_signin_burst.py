"""A burst of concurrent console sign-ins against a gateway served as deployed (docs/failure-modes.md,
"A sign-in burst"): gunicorn with gevent workers on PostgreSQL and Redis, the production settings'
password hasher (PBKDF2, run off the event loop), so that sign-ins overlap while their passwords hash;
and another account's billed calls meanwhile, which the burst must not slow down or break.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.db import connection

from console.signin import ACCOUNT_GROUP
from tests.gunicorn_server import gunicorn_serving
from tests.rate_windows import window_key_fresh

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.skipif(
        not settings.CACHES["default"]["BACKEND"].endswith("RedisCache"), reason="needs Redis"
    ),
    pytest.mark.django_db(transaction=True),
]

ACCOUNT_LIMIT = 3
GUESSES = 30


@pytest.fixture
def gateway(tmp_path: Path):
    env = {
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings",  # its PBKDF2 hasher, not the tests' MD5
        "GUNICORN_WORKER_CLASS": "",
        "WEB_CONCURRENCY": "2",
        "GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT": str(ACCOUNT_LIMIT),
        "GATEWAY_SIGNIN_FAILURES_PER_ADDRESS": "10000",
    }
    log = tmp_path / "gunicorn.log"
    with gunicorn_serving(log_path=log, env=env) as base_url:
        yield base_url, log


def _signed_in_form(base_url: str) -> requests.Session:
    """A browser that has loaded the sign-in page: its CSRF cookie and the form's token."""
    session = requests.Session()
    page = session.get(f"{base_url}/accounts/login/", timeout=10)
    session.csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return session


def test_concurrent_guesses_on_one_username_check_at_most_its_limit(gateway):
    base_url, log = gateway
    username = window_key_fresh(
        group=ACCOUNT_GROUP,
        period=settings.GATEWAY_SIGNIN_WINDOW_SECONDS,
        candidate=lambda: f"guess-{uuid.uuid4().hex[:8]}",
        seconds=120,
    )
    sessions = [_signed_in_form(base_url) for _ in range(GUESSES)]

    def guess(session: requests.Session) -> int:
        response = session.post(
            f"{base_url}/accounts/login/",
            data={"username": username, "password": "wrong", "csrfmiddlewaretoken": session.csrf},
            headers={"Referer": f"{base_url}/accounts/login/"},
            timeout=60,
        )
        return response.status_code

    with ThreadPoolExecutor(max_workers=GUESSES) as pool:
        statuses = Counter(pool.map(guess, sessions))

    # 200: the password was checked (and was wrong); 429: refused before it was checked.
    assert set(statuses) <= {200, 429}, (statuses, log.read_text()[-3000:])
    assert statuses[200] == ACCOUNT_LIMIT, statuses
    assert statuses[429] == GUESSES - ACCOUNT_LIMIT


BURST = 45
USERNAMES = 15
POOL_SIZE = 4


@pytest.fixture
def bystander(alice, alpha_group, fake_upstream_make, fake_upstream):
    """alice's key to a fixed-price image model on the fake upstream (answering at once)."""
    from billing.ledger import wallet_top_up
    from keys.services import api_key_create
    from tests.factories import image_model_make

    wallet_top_up(account=alice, amount="100.00", reference="load")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[fake_upstream_make()], price="0.25")
    return api_key_create(account=alice, group=alpha_group, label="bystander")[1]


def test_a_sign_in_burst_leaves_another_accounts_billed_calls_fast_and_unbroken(bystander, tmp_path: Path):
    env = {
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings",
        "GUNICORN_WORKER_CLASS": "",
        "WEB_CONCURRENCY": "1",  # every sign-in and every billed call share one process's pool
        "DATABASE_POOL_MAX_SIZE": str(POOL_SIZE),
        "DATABASE_POOL_TIMEOUT": "3",
        "GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT": "10000",
        "GATEWAY_SIGNIN_FAILURES_PER_ADDRESS": "10000",
    }
    log = tmp_path / "gunicorn.log"
    with gunicorn_serving(log_path=log, env=env) as base_url:
        sessions = [_signed_in_form(base_url) for _ in range(BURST)]
        names = [f"burst-{uuid.uuid4().hex[:6]}-{i}" for i in range(USERNAMES)]
        done = threading.Event()
        latencies: list[float] = []
        statuses: list[int] = []

        def billed_calls() -> None:
            index = 0
            while not done.is_set():
                started = time.monotonic()
                response = requests.post(
                    f"{base_url}/v1/images/generations",
                    json={"model": "alpha-fake", "prompt": "x"},
                    headers={"Authorization": f"Bearer {bystander}", "X-Request-Id": f"by-{index}"},
                    timeout=60,
                )
                latencies.append(time.monotonic() - started)
                statuses.append(response.status_code)
                index += 1
                time.sleep(0.05)

        def sign_in(numbered: tuple[int, requests.Session]) -> int:
            index, session = numbered
            return session.post(
                f"{base_url}/accounts/login/",
                data={
                    "username": names[index % USERNAMES],
                    "password": "wrong",
                    "csrfmiddlewaretoken": session.csrf,
                },
                headers={"Referer": f"{base_url}/accounts/login/"},
                timeout=120,
            ).status_code

        caller = threading.Thread(target=billed_calls)
        caller.start()
        time.sleep(0.5)
        with ThreadPoolExecutor(max_workers=BURST) as pool:
            sign_ins = Counter(pool.map(sign_in, enumerate(sessions)))
        done.set()
        caller.join(timeout=60)

    assert set(sign_ins) <= {200, 429}, (sign_ins, log.read_text()[-3000:])
    assert Counter(statuses) == {200: len(statuses)}, (Counter(statuses), log.read_text()[-3000:])
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    assert p99 < 1.0, (p99, latencies[-5:])
