"""One `gateway.call` line per API call, written when its usage scope closes: who (a key by its display
prefix), which model, how it ended, where it went, how long, what it cost; JSON with LOG_FORMAT=json.
Never the secret, never the prompt."""

from __future__ import annotations

import datetime
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from gunicorn.config import Config

from core.access_log import ACCESS_LOG_FORMAT, AccessLogger, json_formatter
from tests.images.test_images_api import alice_key, post_json  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "a lighthouse at dawn, secret-prompt-words"
FIELDS = (
    "request_id",
    "credential",
    "model",
    "endpoint",
    "status",
    "error_code",
    "upstream",
    "attempts",
    "latency_ms",
    "amount",
)


def call_records(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "gateway.call"]


@pytest.mark.django_db
def test_a_successful_call_logs_one_line_with_its_outcome(client, caplog, alice_key, alpha_model):  # noqa: F811
    caplog.set_level(logging.INFO, logger="gateway.call")
    response = post_json(client, alice_key, {"model": "alpha-image-2", "prompt": PROMPT, "size": "64x64"})
    assert response.status_code == 200
    (record,) = call_records(caplog)
    assert record.request_id == response["X-Request-Id"]
    assert record.credential == alice_key[:11] + "…"
    assert record.model == "alpha-image-2"
    assert record.endpoint
    assert (record.status, record.error_code) == (200, "")
    assert (record.upstream, record.attempts) == ("demo", 1)
    assert isinstance(record.latency_ms, int)
    assert record.amount == "0.15000000"

    line = json_formatter().format(record)
    fields = json.loads(line)
    assert {name: fields[name] for name in FIELDS} == {name: getattr(record, name) for name in FIELDS}
    assert fields["logger"] == "gateway.call" and fields["level"] == "INFO"
    assert alice_key not in line and "secret-prompt-words" not in line
    assert alice_key not in record.getMessage() and "secret-prompt-words" not in record.getMessage()


@pytest.mark.django_db
def test_a_refused_call_logs_its_status_and_code(client, caplog, alice_key, alpha_model):  # noqa: F811
    caplog.set_level(logging.INFO, logger="gateway.call")
    response = post_json(client, alice_key, {"model": "alpha-image-2", "prompt": PROMPT, "size": "7x7"})
    assert response.status_code == 400
    (record,) = call_records(caplog)
    assert record.status == 400
    assert record.error_code == response.json()["error"]["code"]
    assert (record.upstream, record.attempts, record.amount) == ("", 0, "0")
    line = json_formatter().format(record)
    assert json.loads(line)["status"] == 400
    assert alice_key not in line and "secret-prompt-words" not in line


def test_log_format_json_makes_every_django_log_line_json():
    script = (
        "import logging, django; django.setup()\n"
        "logging.getLogger('gateway.call').info('call', extra={'status': 200, 'attempts': 2})\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test", "LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    fields = json.loads(completed.stderr.strip().splitlines()[-1])
    assert (fields["logger"], fields["message"], fields["status"], fields["attempts"]) == (
        "gateway.call",
        "call",
        200,
        2,
    )


def access_line(tmp_path, monkeypatch, *, log_format: str, path: str, status: str = "200 OK") -> str:
    monkeypatch.setenv("LOG_FORMAT", log_format)
    log_file = tmp_path / f"access-{log_format}.log"
    config = Config()
    config.set("accesslog", str(log_file))
    config.set("access_log_format", ACCESS_LOG_FORMAT)
    logger = AccessLogger(config)
    environ = {
        "REMOTE_ADDR": "10.0.0.7",
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "key=sk-secret",
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    response = SimpleNamespace(status=status, sent=17, headers=[("X-Request-Id", "req_1")])
    logger.access(response, SimpleNamespace(headers=[]), environ, datetime.timedelta(microseconds=3000))
    for handler in logger.access_log.handlers:
        handler.flush()
    return log_file.read_text() if log_file.exists() else ""


def test_gunicorns_access_log_is_json_with_log_format_json(tmp_path, monkeypatch):
    line = access_line(tmp_path, monkeypatch, log_format="json", path="/v1/models")
    fields = json.loads(line)
    assert (fields["method"], fields["path"], fields["status"], fields["latency_ms"]) == (
        "GET",
        "/v1/models",
        200,
        3,
    )
    assert fields["request_id"] == "req_1"
    assert "sk-secret" not in line


def test_passing_health_probes_stay_out_of_the_access_log(tmp_path, monkeypatch):
    assert access_line(tmp_path, monkeypatch, log_format="text", path="/readyz") == ""
    failing = access_line(tmp_path, monkeypatch, log_format="text", path="/readyz", status="503 Service")
    assert '"GET /readyz HTTP/1.1" 503' in failing
