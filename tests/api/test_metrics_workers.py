"""/metrics under gunicorn with two workers: every worker records into the shared metrics directory,
so whichever worker answers a scrape, the totals are those of every call (prometheus_client's
multiprocess mode, set up by gunicorn.conf.py). PostgreSQL only: the server is another process on
the test database."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.db import connection
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families

from keys.services import api_key_create
from tests.gunicorn_server import gunicorn_serving

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the server shares the test database: needs PostgreSQL"
    ),
    pytest.mark.django_db(transaction=True),
]

TOKEN = "metrics-token-for-the-workers-test"
CALLS = 16


def requests_total(base_url: str) -> float:
    response = requests.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert response.status_code == 200, response.text
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == "gateway_requests_total" and sample.labels["model"] == "alpha-image-2"
    )


def test_every_worker_scrape_counts_every_workers_calls(alice, alpha_model, tmp_path):
    key = api_key_create(account=alice, group=alice.current_group, label="metrics")[1]
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    # A count left by an earlier run: gunicorn empties the directory when it starts.
    stale = MmapedDict(str(metrics_dir / "counter_1.db"))
    labels = {"endpoint": "images.generations", "model": "alpha-image-2", "group": "1", "status": "200"}
    stale.write_value(
        mmap_key("gateway_requests", "gateway_requests_total", list(labels), list(labels.values()), ""),
        1000.0,
        0.0,
    )
    stale.close()
    env = {
        "WEB_CONCURRENCY": "2",
        "GATEWAY_METRICS_TOKEN": TOKEN,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "GUNICORN_WORKER_CLASS": "",  # the default of gunicorn.conf.py (gevent on PostgreSQL)
    }
    with gunicorn_serving(log_path=tmp_path / "gunicorn.log", env=env) as base_url:
        assert requests_total(base_url) == 0

        def call(index: int) -> int:
            # A new connection per call, so both workers take calls.
            return requests.post(
                f"{base_url}/v1/images/generations",
                json={"model": "alpha-image-2", "prompt": f"call {index}", "size": "64x64"},
                headers={"Authorization": f"Bearer {key}", "Connection": "close"},
                timeout=60,
            ).status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            assert list(pool.map(call, range(CALLS))) == [200] * CALLS
        # Each scrape is answered by whichever worker accepts it; every one sees every call.
        totals = {requests_total(base_url) for _ in range(12)}
        assert totals == {CALLS}
        writers = {path.name for path in metrics_dir.glob("counter_*.db")}
        assert "counter_1.db" not in writers, writers
