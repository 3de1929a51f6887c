"""GET /metrics: who may read it, that billed calls, upstream attempts, refusals, streams, holds and
circuits move it, that no label names a key or an account, and the sample Grafana dashboard only
asks for metrics that exist.

In one test process the metrics live in the default registry and accumulate from test to test, so
each test compares a scrape after with a scrape before. The same totals across gunicorn workers are
in tests/api/test_metrics_workers.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import responses as responses_lib
from django.core.cache import cache
from prometheus_client.parser import text_string_to_metric_families

from billing.holds import hold_reserve
from core.config_cache import config_caches_clear
from keys.services import api_key_create
from monitoring.views import metrics_registry
from tests.factories import image_model_make, text_model_make, upstream_make
from tests.rate_windows import rate_window_wait
from upstreams.circuit import circuit_record_failure

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "metrics-token-for-tests-0123456789"
GEN = "/v1/images/generations"
CHAT_BASE = "https://api.provider.test/v1"
KEY_ENV = "IGW_TEST_METRICS_PROVIDER_KEY"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def metrics_in_this_process(monkeypatch, settings):
    """Metrics in this process's registry, behind a token; a clean cache (rate counters, circuits)."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    settings.GATEWAY_METRICS_TOKEN = TOKEN
    settings.GATEWAY_METRICS_PUBLIC = False
    cache.clear()
    yield
    cache.clear()


class Scrape:
    """The samples of one scrape of /metrics."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` whose labels include `labels`."""
        return sum(
            sample.value
            for sample in self.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )


def scrape(client) -> Scrape:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return Scrape(response.content.decode())


def generate(client, key: str, model: str = "alpha-image-2", **body):
    return client.post(
        GEN,
        data=json.dumps({"model": model, "prompt": "a lighthouse", "size": "64x64", **body}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.fixture
def alice_key(alice, alpha_group):
    return api_key_create(account=alice, group=alpha_group, label="metrics")[1]


# --- Who may read it -----------------------------------------------------------------------------------


def test_it_asks_for_the_token_and_answers_json_401_without_it(client):
    for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {TOKEN}"}):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 401
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "invalid_metrics_token"
        assert TOKEN not in response.content.decode()
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_without_a_token_it_is_not_found_unless_made_public(client, settings):
    settings.GATEWAY_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    settings.GATEWAY_METRICS_PUBLIC = True
    response = client.get("/metrics")
    assert response.status_code == 200
    assert "gateway_holds_open" in response.content.decode()


def test_reading_the_metrics_is_not_an_api_call(client, alice):
    from billing.models import UsageRecord

    before = scrape(client).value("gateway_requests_total")
    scrape(client)
    assert scrape(client).value("gateway_requests_total") == before
    assert not UsageRecord.objects.exists()


# --- Calls ---------------------------------------------------------------------------------------------


def test_a_billed_image_call_moves_requests_latency_spend_and_upstream_attempts(
    client, alice, alice_key, alpha_model, alpha_group
):
    labels = {"endpoint": "images.generations", "model": "alpha-image-2", "group": str(alpha_group.pk)}
    before = scrape(client)
    response = generate(client, alice_key)
    assert response.status_code == 200
    after = scrape(client)

    def moved(name: str, **selected: str) -> float:
        return after.value(name, **selected) - before.value(name, **selected)

    assert moved("gateway_requests_total", **labels, status="200") == 1
    assert moved("gateway_request_duration_seconds_count", endpoint="images.generations") == 1
    assert moved("gateway_charged_amount_total", model="alpha-image-2") == pytest.approx(0.15)
    assert moved("gateway_upstream_attempts_total", upstream="demo") == 1
    assert moved("gateway_upstream_attempt_duration_seconds_count", upstream="demo") == 1
    assert moved("gateway_upstream_retries_total", upstream="demo") == 0
    assert moved("gateway_upstream_failures_total", upstream="demo") == 0
    # No label carries a key, an account or a request id.
    for secret in (alice_key, alice_key[:12], "alice", response["X-Request-Id"]):
        assert secret not in after.text


@pytest.mark.django_db(transaction=True)
def test_upstream_failures_are_counted_by_class_and_failovers_as_retries(
    client, alice, alice_key, alpha_group, fake_upstream_make, fake_upstream, settings
):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "base_delay": 0.01, "max_wait": 0.05}
    first, second = fake_upstream_make("fake-first"), fake_upstream_make("fake-second")
    first.priority, second.priority = 0, 1
    first.save(update_fields=["priority"])
    second.save(update_fields=["priority"])
    image_model_make(
        model_id="alpha-fake", group=alpha_group, upstreams=[first, second], price="0.25", sizes=["64x64"]
    )
    fake_upstream.script(GEN, {"status": 503, "json": {"error": {"message": "overloaded"}}})
    before = scrape(client)
    assert generate(client, alice_key, model="alpha-fake").status_code == 200
    after = scrape(client)
    assert (
        after.value("gateway_upstream_failures_total", upstream="fake-first", **{"class": "5xx"})
        - (before.value("gateway_upstream_failures_total", upstream="fake-first", **{"class": "5xx"}))
        == 1
    )
    assert (
        after.value("gateway_upstream_attempts_total") - before.value("gateway_upstream_attempts_total") == 2
    )
    assert (
        after.value("gateway_upstream_retries_total", upstream="fake-second")
        - before.value("gateway_upstream_retries_total", upstream="fake-second")
        == 1
    )


@pytest.fixture
def chat_model(chat_group, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-provider-key-0123456789")
    upstream = upstream_make(name="openai-main", base_url=CHAT_BASE, api_key_env=KEY_ENV, kind="openai")
    return text_model_make(
        model_id="alpha-chat", group=chat_group, upstreams=[upstream], cached_input_price="0.50"
    )


def test_a_text_call_counts_its_tokens_by_kind(client, chat_group, chat_model):
    from accounts.services import account_create, account_set_groups
    from billing.ledger import wallet_top_up

    tara = account_create(username="tara", email="tara@example.com", password="tara-password-1")
    account_set_groups(account=tara, allowed_groups=[chat_group], current_group=chat_group)
    wallet_top_up(account=tara, amount="1.00", reference="fixture")
    key = api_key_create(account=tara, group=chat_group, label="agent")[1]
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "vendor-chat-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 345,
            "total_tokens": 1545,
            "prompt_tokens_details": {"cached_tokens": 200},
        },
    }
    labels = {"model": "alpha-chat", "group": str(chat_group.pk)}
    before = scrape(client)
    with responses_lib.RequestsMock() as upstream:
        upstream.post(f"{CHAT_BASE}/chat/completions", json=answer)
        response = client.post(
            "/v1/chat/completions",
            data=json.dumps({"model": "alpha-chat", "messages": [{"role": "user", "content": "Hi"}]}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )
    assert response.status_code == 200
    after = scrape(client)
    moved = {
        kind: after.value("gateway_tokens_total", **labels, kind=kind)
        - before.value("gateway_tokens_total", **labels, kind=kind)
        for kind in ("input", "cached", "cache_write", "output")
    }
    assert moved == {"input": 1000, "cached": 200, "cache_write": 0, "output": 345}
    charged = after.value("gateway_charged_amount_total", **labels) - before.value(
        "gateway_charged_amount_total", **labels
    )
    assert charged == pytest.approx(float(Decimal("0.00486")))
    assert (
        after.value("gateway_requests_total", endpoint="chat.completions", status="200")
        - before.value("gateway_requests_total", endpoint="chat.completions", status="200")
        == 1
    )


def test_refused_calls_are_counted_by_reason(client, bob, alpha_model, alpha_group):
    api_key, key = api_key_create(account=bob, group=alpha_group, label="empty wallet")
    before = scrape(client)
    assert generate(client, key).status_code == 403  # bob's wallet is empty
    alpha_group.rpm = 1
    alpha_group.save(update_fields=["rpm"])
    config_caches_clear()  # the test's transaction never commits, so nothing else tells the cache
    rate_window_wait(f"api_key:{api_key.pk}")
    assert generate(client, key).status_code == 403  # the minute's one call
    assert generate(client, key).status_code == 429
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert moved("gateway_refusals_total", reason="insufficient_balance") == 2
    assert moved("gateway_refusals_total", reason="rate_limited") == 1
    assert moved("gateway_requests_total", endpoint="images.generations", status="403") == 2
    assert moved("gateway_requests_total", endpoint="images.generations", status="429") == 1
    assert moved("gateway_charged_amount_total") == 0
    assert "bob" not in after.text


def test_an_open_stream_is_counted_until_it_ends(client, alice, alice_key, alpha_group, demo_upstream):
    image_model_make(
        model_id="alpha-stream",
        group=alpha_group,
        upstreams=[demo_upstream],
        stream_supported=True,
        sizes=["64x64"],
    )
    before = scrape(client).value("gateway_streams_open", endpoint="images.generations")
    response = generate(client, alice_key, model="alpha-stream", stream=True, partial_images=1)
    assert response.status_code == 200, response.content
    events = iter(response.streaming_content)
    next(events)  # the stream has started
    assert scrape(client).value("gateway_streams_open", endpoint="images.generations") == before + 1
    rest = b"".join(events)
    response.close()
    assert b"image_generation.completed" in rest
    after = scrape(client)
    assert after.value("gateway_streams_open", endpoint="images.generations") == before
    assert after.value("gateway_requests_total", model="alpha-stream", status="200") >= 1


# --- Read at scrape time -------------------------------------------------------------------------------


def test_open_holds_and_circuits_are_read_when_scraped(client, alice, demo_upstream):
    empty = scrape(client)
    assert empty.value("gateway_holds_open", kind="wallet") == 0
    assert empty.value("gateway_upstream_circuit_state", upstream="demo") == 0
    hold_reserve(account_id=alice.pk, amount=Decimal("0.40"), reference="req-held")
    hold_reserve(account_id=alice.pk, amount=Decimal("0.10"), reference="req-held-2")
    for _ in range(5):
        circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=60)
    after = scrape(client)
    assert after.value("gateway_holds_open", kind="wallet") == 2
    assert after.value("gateway_holds_amount", kind="wallet") == pytest.approx(0.5)
    assert after.value("gateway_holds_open", kind="subscription") == 0
    assert after.value("gateway_upstream_circuit_state", upstream="demo") == 1
    assert "req-held" not in after.text


# --- The dashboard -------------------------------------------------------------------------------------

SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


def exposed_names() -> set[str]:
    """Every sample name the scrape can carry, whether or not it has samples yet."""
    names = set()
    for family in metrics_registry().collect():
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def test_the_sample_dashboard_parses_and_asks_only_for_metrics_that_exist():
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    expressions = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    assert len(expressions) >= 9
    known = exposed_names()
    asked = {name for expr in expressions for name in re.findall(r"\bgateway_[a-z_]+", expr)}
    assert asked and asked <= known, asked - known
    # Every metric the gateway records is on the dashboard.
    families = {re.sub(r"_(total|bucket|sum|count|created)$", "", name) for name in asked}
    assert {
        "gateway_requests",
        "gateway_request_duration_seconds",
        "gateway_upstream_failures",
        "gateway_upstream_circuit_state",
        "gateway_holds_open",
        "gateway_charged_amount",
        "gateway_tokens",
        "gateway_refusals",
        "gateway_streams_open",
    } <= families


# --- The metrics directory under gunicorn (its hooks, run as gunicorn runs them in the master) ----------


def _hooks_run(script: str, env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "WEB_CONCURRENCY")}
    prelude = "import os, runpy\nconf = runpy.run_path('gunicorn.conf.py')\nclass Worker:\n    pid = 4242\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + script],
        cwd=ROOT,
        env={**clean, "GATEWAY_ENV_FILE": "", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_gunicorn_empties_a_given_metrics_directory_and_forgets_a_dead_workers_live_gauges(tmp_path):
    for name in ("counter_1.db", "gauge_livesum_1.db"):
        (tmp_path / name).write_bytes(b"left by an earlier run")
    _hooks_run("conf['on_starting'](None)", {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []
    for name in ("counter_4242.db", "gauge_livesum_4242.db"):
        (tmp_path / name).write_bytes(b"")
    _hooks_run("conf['child_exit'](None, Worker())", {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    assert [path.name for path in tmp_path.iterdir()] == ["counter_4242.db"]  # its counts stay
    _hooks_run("conf['on_exit'](None)", {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    assert tmp_path.is_dir()  # a directory the operator gave is kept


def test_gunicorn_makes_a_fresh_metrics_directory_and_removes_it_on_exit():
    made = _hooks_run(
        "conf['on_starting'](None)\n"
        "made = os.environ['PROMETHEUS_MULTIPROC_DIR']\n"
        "assert os.path.isdir(made)\n"
        "conf['on_exit'](None)\n"
        "print(made)",
        {},
    )
    assert made and not Path(made).exists()
