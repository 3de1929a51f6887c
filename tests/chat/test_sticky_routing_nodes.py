"""Sticky routing across processes: two gateway nodes (gunicorn with gunicorn.conf.py, as deployed)
sharing only PostgreSQL and Redis, in front of a text model with two upstreams (two fake upstream
processes). A conversation's calls, whichever node takes them, go to the upstream that answered its
first; distinct conversations still spread over both.

Real processes on loopback; PostgreSQL and Redis, skipped otherwise.
"""

from __future__ import annotations

import itertools
from collections import Counter
from contextlib import ExitStack
from decimal import Decimal

import pytest
import requests
from django.conf import settings
from django.db import connection

from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import UsageRecord, Wallet
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.conftest import FAKE_UPSTREAM_KEY, FAKE_UPSTREAM_KEY_ENV
from tests.factories import text_model_make, upstream_make
from tests.gunicorn_server import gunicorn_serving

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the nodes share the test database"),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the nodes share Redis: needs REDIS_URL"),
    pytest.mark.django_db(transaction=True),
]

CHAT = "/v1/chat/completions"
SPREAD = 21  # distinct conversations all on one of two equal upstreams: 2 x 2^-21 of the time


@pytest.fixture
def key(chat_group, fake_upstream, second_fake_upstream, monkeypatch):
    """A key of an account with ¥10 in the chat group, whose model `sticky-chat` has the two fake
    upstream processes at one priority."""
    monkeypatch.setenv(FAKE_UPSTREAM_KEY_ENV, FAKE_UPSTREAM_KEY)  # the nodes inherit it
    upstreams = [
        upstream_make(name=name, base_url=fake.base_url, api_key_env=FAKE_UPSTREAM_KEY_ENV)
        for name, fake in (("fake-one", fake_upstream), ("fake-two", second_fake_upstream))
    ]
    text_model_make(model_id="sticky-chat", group=chat_group, upstreams=upstreams)
    account = account_create(username="tara", email="tara@example.com", password="tara-password-1")
    account_set_groups(account=account, allowed_groups=[chat_group], current_group=chat_group)
    wallet_top_up(account=account, amount="10.00", reference="fixture")
    return api_key_create(account=account, group=chat_group, label="nodes")[1]


@pytest.fixture
def nodes(key, tmp_path):
    """Nodes A and B, each one gevent worker on the test database and Redis."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                gunicorn_serving(
                    log_path=tmp_path / f"node-{name}.log",
                    env={"GUNICORN_WORKER_CLASS": "", "DATABASE_POOL_MAX_SIZE": "4"},
                )
            )
            for name in ("a", "b")
        ]


def chat(base_url: str, key: str, conversation: str) -> requests.Response:
    response = requests.post(
        f"{base_url}{CHAT}",
        json={
            "model": "sticky-chat",
            "messages": [{"role": "user", "content": "Hi"}],
            "prompt_cache_key": conversation,
        },
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text[:500]
    return response


def received(*fakes) -> list[int]:
    return [sum(1 for made in fake.requests() if made["path"] == CHAT) for fake in fakes]


def test_two_nodes_send_a_conversation_to_one_upstream_and_spread_the_others(
    nodes, key, fake_upstream, second_fake_upstream
):
    alternating = itertools.cycle(nodes)
    for _ in range(12):
        chat(next(alternating), key, "claude-session-1")

    assert sorted(received(fake_upstream, second_fake_upstream)) == [0, 12]
    by_upstream = Counter(UsageRecord.objects.values_list("upstream", flat=True))
    assert len(by_upstream) == 1 and sum(by_upstream.values()) == 12

    fake_upstream.reset()
    second_fake_upstream.reset()
    for index in range(SPREAD):
        chat(next(alternating), key, f"claude-session-{index + 2}")

    one, two = received(fake_upstream, second_fake_upstream)
    assert one > 0 and two > 0 and one + two == SPREAD
    assert Wallet.objects.get(account__user__username="tara").balance < Decimal("10.00")
    assert ledger_check() == []
