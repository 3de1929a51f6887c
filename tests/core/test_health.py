"""GET /healthz (the process answers) and GET /readyz (the database, Redis when configured, and every
migration): no credential, JSON, 503 naming what failed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.db.migrations.recorder import MigrationRecorder

from billing.models import UsageRecord
from core import health

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_health(monkeypatch):
    """No migration check has passed yet and no failure has been logged in this process."""
    monkeypatch.setattr(health, "_migrations_applied", False)
    monkeypatch.setattr(health, "_last_failures", {})


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def probe_in_subprocess(**env: str) -> dict[str, tuple[int, dict]]:
    """GET /healthz and /readyz through Django's test client in a fresh process with `env` (a database
    that cannot be reached cannot be swapped in under a running test's connections)."""
    script = (
        "import json, django; django.setup()\n"
        "from django.test import Client\n"
        "client = Client()\n"
        "out = {p: (r.status_code, r.json()) for p in ('/healthz', '/readyz') for r in [client.get(p)]}\n"
        "print(json.dumps(out))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {path: (status, body) for path, (status, body) in json.loads(completed.stdout).items()}


@pytest.mark.django_db
def test_it_is_ready_when_every_check_passes(client, settings):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok" and body["failed"] == []
    expected = ["database", "migrations"] + (["redis"] if settings.REDIS_URL else [])
    assert sorted(body["checks"]) == sorted(expected)
    assert all(check["ok"] for check in body["checks"].values())


@pytest.mark.django_db
def test_probes_need_no_credential_and_are_not_api_calls(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    assert client.head("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405
    # A load balancer names the node by its address, which ALLOWED_HOSTS does not list.
    assert client.get("/readyz", headers={"host": "10.0.3.7:8000"}).status_code == 200
    assert not UsageRecord.objects.exists()


def test_liveness_answers_and_readiness_names_the_database_when_it_is_down():
    results = probe_in_subprocess(
        DATABASE_URL=f"postgres://gateway@127.0.0.1:{closed_port()}/gateway",
        DATABASE_POOL_TIMEOUT="1",
        REDIS_URL="",
    )
    assert results["/healthz"] == (200, {"status": "ok"})
    status, body = results["/readyz"]
    assert status == 503
    assert body["status"] == "unavailable"
    assert "database" in body["failed"]
    assert body["checks"]["database"]["ok"] is False
    assert "127.0.0.1" not in json.dumps(body)  # the driver's message goes to the log, not the probe


@pytest.mark.django_db
def test_readiness_names_redis_when_it_does_not_answer(client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["redis"]
    assert body["checks"]["database"]["ok"] is True
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_readiness_names_an_unapplied_migration(client):
    # The recorder forgets the latest migration of an app: to Django's executor it is unapplied, as
    # after a deploy whose `migrate` step did not run (the test's transaction restores the row).
    latest = MigrationRecorder.Migration.objects.filter(app="billing").order_by("-id").first()
    assert latest is not None
    latest.delete()
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["migrations"]
    assert f"billing.{latest.name}" in body["checks"]["migrations"]["detail"]


@pytest.mark.django_db
def test_a_passed_migration_check_is_not_repeated(client, django_assert_max_num_queries):
    assert client.get("/readyz").status_code == 200
    with django_assert_max_num_queries(1):  # SELECT 1 only
        assert client.get("/readyz").status_code == 200
