"""CORS for browser clients of /v1: off unless GATEWAY_CORS_ALLOWED_ORIGINS is set; then preflights
are answered before any credential is asked for, and only listed origins get Access-Control headers.

The setting decides the middleware at start, so each configuration runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.images.test_images_api import alice_key  # noqa: F401 - a fixture

ROOT = Path(__file__).resolve().parents[2]
APP = "https://app.example.com"
SDK_HEADERS = (
    "authorization, content-type, x-api-key, anthropic-version, idempotency-key, x-request-id, "
    "x-stainless-os, x-stainless-retry-count"
)

_SCRIPT = """
import json, sys, django
django.setup()
from django.test import Client
client = Client()
out = []
for method, path, headers in json.loads(sys.argv[1]):
    response = getattr(client, method)(path, headers=headers)
    out.append({"status": response.status_code, "headers": {k.lower(): v for k, v in response.items()}})
print(json.dumps(out))
"""


def requests_in_process(requests: list[tuple[str, str, dict]], **env: str) -> list[dict]:
    completed = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(requests)],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test",
            "ALLOWED_HOSTS": "testserver",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout)


def preflight(origin: str, path: str = "/v1/chat/completions") -> tuple[str, str, dict]:
    return (
        "options",
        path,
        {
            "origin": origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": SDK_HEADERS,
        },
    )


@pytest.mark.django_db
def test_it_is_off_by_default(client, alice_key, alpha_model):  # noqa: F811
    response = client.get("/v1/models", headers={"Authorization": f"Bearer {alice_key}", "Origin": APP})
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response
    response = client.options("/v1/models", headers={"Origin": APP, "Access-Control-Request-Method": "GET"})
    assert "Access-Control-Allow-Origin" not in response


def test_a_listed_origin_gets_its_preflight_and_its_answers_without_a_credential():
    allowed, real, unlisted, console = requests_in_process(
        [
            preflight(APP),
            ("get", "/v1/models", {"origin": APP}),  # no key: 401, still readable by the page
            preflight("https://evil.example.net"),
            preflight(APP, path="/console/"),
        ],
        GATEWAY_CORS_ALLOWED_ORIGINS=f"{APP}, https://other.example.com",
    )
    assert allowed["status"] == 200
    headers = allowed["headers"]
    assert headers["access-control-allow-origin"] == APP
    assert "POST" in headers["access-control-allow-methods"]
    allowed_headers = {name.strip() for name in headers["access-control-allow-headers"].split(",")}
    assert {name.strip() for name in SDK_HEADERS.split(",")} <= allowed_headers
    assert {"x-goog-api-key", "anthropic-beta"} <= allowed_headers
    assert "access-control-allow-credentials" not in headers

    assert real["status"] == 401
    assert real["headers"]["access-control-allow-origin"] == APP
    exposed = {name.strip() for name in real["headers"]["access-control-expose-headers"].split(",")}
    assert {"x-request-id", "retry-after"} <= exposed

    assert "access-control-allow-origin" not in unlisted["headers"]
    assert "access-control-allow-origin" not in console["headers"]  # only /v1 paths


def test_a_star_allows_any_origin():
    (answer,) = requests_in_process(
        [preflight("https://anywhere.example.org")], GATEWAY_CORS_ALLOWED_ORIGINS="*"
    )
    assert answer["status"] == 200
    assert answer["headers"]["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("value", ["app.example.com", "https://app.example.com/path", "*, https://a.example"])
def test_a_bad_origin_stops_the_start_naming_the_variable(value):
    completed = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test",
            "GATEWAY_CORS_ALLOWED_ORIGINS": value,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0
    assert "GATEWAY_CORS_ALLOWED_ORIGINS" in completed.stderr
