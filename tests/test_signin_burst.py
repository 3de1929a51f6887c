"""A burst of concurrent console sign-ins against a gateway served as deployed (docs/failure-modes.md,
"A sign-in burst"): gunicorn with gevent workers on PostgreSQL and Redis, the production settings'
password hasher (PBKDF2, run off the event loop), so that sign-ins overlap while their passwords hash.
"""

from __future__ import annotations

import re
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
