"""Two gateway nodes, as two machines would run them (docs/deployment.md): two gunicorn processes with
gunicorn.conf.py sharing only PostgreSQL and Redis, behind deploy/nginx.conf, or called one by one
where the test must choose the node. What one node does, the other sees at once: a revoked key, the
limits (counted for both together), an idempotency key, an opened circuit; and when both race on
one balance, no money is spent twice. The money race and a billed call per node also run through
PgBouncer in transaction mode (DATABASE_PREPARED_STATEMENTS=0).

Real processes on loopback; PostgreSQL and Redis, skipped otherwise (nginx and PgBouncer where used).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.db import connection

from billing.ledger import wallet_top_up
from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from billing.selectors import ledger_check
from groups.services import group_upsert
from keys.models import ApiKey
from keys.services import api_key_create
from tests.conftest import FAKE_UPSTREAM_KEY_ENV
from tests.factories import image_model_make, upstream_make
from tests.gunicorn_server import gunicorn_serving, shared_database_url
from tests.nginx_process import NGINX, nginx_serving
from tests.pgbouncer_process import PGBOUNCER, pgbouncer_serving
from tests.rate_windows import rate_window_wait

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the nodes share the test database: needs PostgreSQL"),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the nodes share Redis: needs REDIS_URL"),
    pytest.mark.django_db(transaction=True),
]
needs_nginx = pytest.mark.skipif(NGINX is None, reason="needs nginx (apt-get install nginx)")
needs_pgbouncer = pytest.mark.skipif(PGBOUNCER is None, reason="needs pgbouncer (apt-get install pgbouncer)")

GEN = "/v1/images/generations"
PRICE = Decimal("0.25")
CIRCUIT_THRESHOLD = 3


@dataclass
class Cluster:
    nodes: list[str]  # each node's own base URL
    proxy: str | None  # nginx in front of both, when started
    key: str


@contextmanager
def cluster_serving(
    tmp_path: Path,
    key: str,
    *,
    database_url: str,
    proxy: bool,
    prepared_statements: bool = True,
    node_env: dict[str, dict[str, str]] | None = None,
) -> Iterator[Cluster]:
    """Nodes A and B (each one gevent worker, its access log in tmp_path/node-X.access.log, its own
    settings from `node_env["a"]`/`["b"]`), and nginx in front of both when `proxy`."""
    env = {
        "DATABASE_URL": database_url,
        "GUNICORN_WORKER_CLASS": "",  # gevent, as deployed on PostgreSQL
        "DATABASE_POOL_MAX_SIZE": "4",
        "GATEWAY_RETRY_MAX": "1",  # a failed attempt moves on to the next upstream once, no more
        "GATEWAY_CIRCUIT_THRESHOLD": str(CIRCUIT_THRESHOLD),
        "GATEWAY_TRUSTED_PROXIES": "127.0.0.1",
    }
    if not prepared_statements:
        env["DATABASE_PREPARED_STATEMENTS"] = "0"
    with ExitStack() as stack:
        nodes = [
            stack.enter_context(
                gunicorn_serving(
                    log_path=tmp_path / f"node-{name}.log",
                    env={
                        **env,
                        "GUNICORN_ACCESSLOG": str(tmp_path / f"node-{name}.access.log"),
                        **(node_env or {}).get(name, {}),
                    },
                )
            )
            for name in ("a", "b")
        ]
        front = None
        if proxy:
            front = stack.enter_context(nginx_serving([url.removeprefix("http://") for url in nodes])).url
        yield Cluster(nodes=nodes, proxy=front, key=key)


@pytest.fixture
def key(alice, alpha_group, fake_upstream_make, fake_upstream):
    upstream = fake_upstream_make("fake-openai")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[upstream], price=str(PRICE))
    return api_key_create(account=alice, group=alpha_group, label="two nodes")[1]


@pytest.fixture
def cluster(key, tmp_path):
    """Two nodes on PostgreSQL itself, called one by one."""
    with cluster_serving(tmp_path, key, database_url=shared_database_url(), proxy=False) as serving:
        yield serving


def call(base_url: str, key: str, *, headers: dict[str, str] | None = None, prompt: str = "x"):
    return requests.post(
        f"{base_url}{GEN}",
        json={"model": "alpha-fake", "prompt": prompt},
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
        timeout=30,
    )


def test_a_key_revoked_on_one_node_is_refused_on_the_other_at_once(cluster, alice):
    a, b = cluster.nodes
    # Both nodes have served the key: each holds it in its configuration cache.
    assert call(a, cluster.key).status_code == 200
    assert call(b, cluster.key).status_code == 200

    # Alice revokes it in the console served by node A.
    console = requests.Session()
    console.get(f"{a}/accounts/login/", timeout=10)
    token = console.cookies["csrftoken"]
    signed_in = console.post(
        f"{a}/accounts/login/",
        data={"username": "alice", "password": "alice-password-1", "csrfmiddlewaretoken": token},
        allow_redirects=False,
        timeout=10,
    )
    assert signed_in.status_code == 302, signed_in.text[:500]
    api_key = ApiKey.objects.get(account=alice)
    revoked = console.post(
        f"{a}/console/keys/{api_key.pk}/revoke/",
        data={"csrfmiddlewaretoken": console.cookies["csrftoken"]},
        allow_redirects=False,
        timeout=10,
    )
    assert revoked.status_code == 302, revoked.text[:500]

    refused = call(b, cluster.key)
    assert refused.status_code == 401, refused.text
    assert call(a, cluster.key).status_code == 401


def statuses(responses) -> Counter:
    return Counter(response.status_code for response in responses)


def test_the_limits_hold_for_both_nodes_together(cluster, alice, alpha_group, fake_upstream):
    a, b = cluster.nodes
    api_key = ApiKey.objects.get(account=alice)

    # Concurrency 2: eight calls at once, four on each node, each held 1 s at the upstream.
    group_upsert(group_id=alpha_group.pk, name=alpha_group.name, status="active", image_enabled=True,
                 billing="balance", allow_group_override=True, rpm=0, concurrency=2)  # fmt: skip
    fake_upstream.script(GEN, *[{"delay": 1.0}] * 8)
    barrier = threading.Barrier(8)

    def at_once(index: int) -> requests.Response:
        barrier.wait()
        return call((a, b)[index % 2], cluster.key)

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(at_once, range(8)))
    assert statuses(answers) == {200: 2, 429: 6}, [r.text for r in answers]
    # The six refused calls left their scripted 1 s answers queued: drop them, or the next part's
    # calls would take a second each and could run past the end of the rate window.
    fake_upstream.reset()

    # 6 calls a minute: ten calls, alternating between the nodes.
    group_upsert(group_id=alpha_group.pk, name=alpha_group.name, status="active", image_enabled=True,
                 billing="balance", allow_group_override=True, rpm=6, concurrency=0)  # fmt: skip
    rate_window_wait(f"api_key:{api_key.pk}", seconds=10)
    answers = [call((a, b)[index % 2], cluster.key) for index in range(10)]
    assert [r.status_code for r in answers] == [200] * 6 + [429] * 4
    # Charged: the 2 calls let through at once and the 6 within the minute.
    assert Wallet.objects.get(account=alice).balance == Decimal("10") - 8 * PRICE


def test_an_idempotency_key_replays_on_either_node(cluster, alice):
    a, b = cluster.nodes
    keyed = {"Idempotency-Key": "two-nodes-1"}

    first = call(a, cluster.key, headers=keyed)
    again = call(b, cluster.key, headers=keyed)

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.json() == first.json()
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert Wallet.objects.get(account=alice).balance == Decimal("10") - PRICE


def test_a_circuit_opened_on_one_node_is_seen_by_the_other(
    cluster, alpha_group, fake_upstream, second_fake_upstream
):
    a, b = cluster.nodes
    primary = upstream_make(
        name="primary", base_url=fake_upstream.base_url, api_key_env=FAKE_UPSTREAM_KEY_ENV, timeout_seconds=30
    )
    secondary = upstream_make(
        name="secondary",
        base_url=second_fake_upstream.base_url,
        api_key_env=FAKE_UPSTREAM_KEY_ENV,
        timeout_seconds=30,
        priority=1,
    )
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[primary, secondary])
    down = {"status": 500, "json": {"error": {"message": "down"}}}
    fake_upstream.script(GEN, {}, *[down] * CIRCUIT_THRESHOLD)

    assert call(b, cluster.key).status_code == 200  # node B has seen the primary healthy
    # Node A's calls fail on the primary and are answered by the secondary, until its circuit opens.
    assert [call(a, cluster.key).status_code for _ in range(CIRCUIT_THRESHOLD)] == [200] * CIRCUIT_THRESHOLD
    time.sleep(0.3)  # past the quarter second a process trusts its last clean view (CLEAN_VIEW_SECONDS)
    asked = len(fake_upstream.requests())

    assert [call(b, cluster.key).status_code for _ in range(3)] == [200] * 3
    # Node B skipped the open circuit: not one more request at the primary.
    assert len(fake_upstream.requests()) == asked == 1 + CIRCUIT_THRESHOLD
    assert len(second_fake_upstream.requests()) == CIRCUIT_THRESHOLD + 3


def race_on_one_balance(cluster: Cluster, bob, *, calls: int, affordable: int, via_proxy: bool) -> None:
    """`calls` calls at once with bob's key, split over both nodes (by nginx, or alternately), on a
    balance that pays for `affordable`: exactly that many are charged, the rest refused, and the
    ledger holds."""
    wallet_top_up(account=bob, amount=str(affordable * PRICE), reference="race")
    key = api_key_create(account=bob, group=bob.current_group, label="race")[1]
    targets = [cluster.proxy] * calls if via_proxy else [cluster.nodes[i % 2] for i in range(calls)]
    barrier = threading.Barrier(calls)

    def racer(index: int) -> requests.Response:
        barrier.wait()
        return call(targets[index], key, headers={"X-Request-Id": f"race-{index}"})

    with ThreadPoolExecutor(max_workers=calls) as pool:
        answers = list(pool.map(racer, range(calls)))

    assert statuses(answers) == {200: affordable, 403: calls - affordable}, [r.text for r in answers]
    assert all("INSUFFICIENT_BALANCE" in r.text for r in answers if r.status_code == 403)
    wallet = Wallet.objects.get(account=bob)
    assert (wallet.balance, wallet.held) == (Decimal("0"), Decimal("0"))
    charges = LedgerEntry.objects.filter(kind="charge", reference__startswith="race-")
    assert charges.count() == affordable
    assert {entry.reference for entry in charges} == {
        f"race-{i}" for i, r in enumerate(answers) if r.status_code == 200
    }
    assert not Hold.objects.filter(status="open").exists()
    assert ledger_check() == []


def calls_served(tmp_path: Path, *, status: int | None = None) -> list[int]:
    """Image calls in each node's access log (written once each answer is sent), those answered
    `status` only when given."""
    time.sleep(0.2)
    needle = f" {GEN} " if status is None else f' {GEN} HTTP/1.1" {status} '
    return [(tmp_path / f"node-{name}.access.log").read_text().count(needle) for name in ("a", "b")]


@needs_nginx
def test_no_money_is_spent_twice_when_both_nodes_race_on_one_balance(key, bob, fake_upstream, tmp_path):
    fake_upstream.script(GEN, *[{"delay": 0.2}] * 24)
    with cluster_serving(tmp_path, key, database_url=shared_database_url(), proxy=True) as serving:
        race_on_one_balance(serving, bob, calls=24, affordable=5, via_proxy=True)
        # nginx spread the calls over both nodes.
        assert min(calls_served(tmp_path)) >= 6, calls_served(tmp_path)


@needs_pgbouncer
def test_both_nodes_bill_through_pgbouncer_in_transaction_mode(key, bob, fake_upstream, tmp_path):
    fake_upstream.script(GEN, *[{"delay": 0.2}] * 24)
    with (
        pgbouncer_serving() as through_pgbouncer,
        cluster_serving(
            tmp_path, key, database_url=through_pgbouncer, proxy=False, prepared_statements=False
        ) as serving,
    ):
        # One billed call per node (alice's key), then the race (bob's), alternating over the nodes.
        for index, node in enumerate(serving.nodes):
            answer = call(node, serving.key, headers={"X-Request-Id": f"single-{index}"})
            assert answer.status_code == 200, answer.text
        assert LedgerEntry.objects.filter(kind="charge", reference__startswith="single-").count() == 2
        race_on_one_balance(serving, bob, calls=24, affordable=5, via_proxy=False)
        assert calls_served(tmp_path) == [13, 13]
    assert UsageRecord.objects.filter(status=200).count() == 2 + 5


# A node whose worker is always behind: any lag at all is over this limit (the lag sampler starts
# with the node's first POST, which it therefore serves; every later one is shed).
ALWAYS_BEHIND = {"GATEWAY_SHED_LAG_SECONDS": "0.000000001"}


def node_behind(node: str) -> None:
    """Start the node's lag sampler with a first POST, then check that it sheds calls made to it."""
    requests.post(f"{node}{GEN}", json={}, timeout=10)  # 401, and the sampler runs from now on
    time.sleep(0.2)
    shed = requests.post(f"{node}{GEN}", json={}, timeout=10)
    assert shed.status_code == 503 and shed.json()["error"]["code"] == "overloaded", shed.text
    assert shed.headers["X-Accel-Redirect"] == "@shed"


@needs_nginx
def test_nginx_sends_a_call_one_node_shed_to_the_other_and_it_is_billed_once(
    key, alice, fake_upstream, tmp_path
):
    balance = Wallet.objects.get(account=alice).balance
    with cluster_serving(
        tmp_path, key, database_url=shared_database_url(), proxy=True, node_env={"a": ALWAYS_BEHIND}
    ) as serving:
        node_behind(serving.nodes[0])
        answers = [call(serving.proxy, serving.key, headers={"X-Request-Id": f"shed-{i}"}) for i in range(6)]

        assert [r.status_code for r in answers] == [200] * 6, [r.text for r in answers]
        assert not any("X-Accel-Redirect" in r.headers for r in answers)
        # Node A shed the calls nginx gave it first; node B served all six.
        shed_by_a, _ = calls_served(tmp_path, status=503)
        assert shed_by_a >= 2  # round robin gives node A some of the six (and the probe's one)
        assert calls_served(tmp_path, status=200) == [0, 6]
    charges = LedgerEntry.objects.filter(kind="charge", reference__startswith="shed-")
    assert sorted(entry.reference for entry in charges) == [f"shed-{i}" for i in range(6)]
    assert Wallet.objects.get(account=alice).balance == balance - 6 * PRICE
    assert UsageRecord.objects.filter(status=200).count() == 6
    assert not Hold.objects.filter(status="open").exists()
    assert ledger_check() == []


@needs_nginx
def test_a_call_every_node_sheds_reaches_the_client_as_503_unbilled(key, alice, fake_upstream, tmp_path):
    balance = Wallet.objects.get(account=alice).balance
    behind = {"a": ALWAYS_BEHIND, "b": ALWAYS_BEHIND}
    with cluster_serving(
        tmp_path, key, database_url=shared_database_url(), proxy=True, node_env=behind
    ) as serving:
        for node in serving.nodes:
            node_behind(node)
        answer = call(serving.proxy, serving.key)

        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "overloaded"
        assert answer.headers["Retry-After"] == "1"
        assert "X-Accel-Redirect" not in answer.headers
        # nginx's first pick, then two tries from @shed: three 503s besides the two probes', no loop.
        assert sum(calls_served(tmp_path, status=503)) == 2 + 3
    assert Wallet.objects.get(account=alice).balance == balance
    assert not LedgerEntry.objects.filter(kind="charge").exists()
    assert not UsageRecord.objects.exists()
