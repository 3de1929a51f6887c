"""Every answer under /v1 and /files is JSON: the error cases Django, its middleware or gunicorn
would otherwise answer with an HTML page (404, 405, 403 CSRF, 431, 414, 413, 400)."""

from __future__ import annotations

import json

import pytest
import requests
from django.db import connection
from django.test import Client, RequestFactory

from api.csrf import csrf_failure
from tests.gunicorn_server import gunicorn_serving

pytestmark = pytest.mark.django_db

FILE = "/files/images/not-a-token"
GENERATIONS = "/v1/images/generations"
BIG_HEADER = "x" * 12_000  # over GATEWAY_MAX_HEADER_FIELD_BYTES, under gunicorn's own limit


def _assert_json_error(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    body = json.loads(response.content)
    assert body["error"]["message"]
    return body


@pytest.fixture
def csrf_client(alice):
    """A browser's client: a console session cookie rides along, and CSRF checks are enforced."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)
    return client


CASES = [
    # (name, method, path, extra request arguments, status)
    ("404 v1", "get", "/v1/no-such-route", {}, 404),
    ("404 files", "get", "/files/no-such-route", {}, 404),
    ("403 files signature", "get", FILE, {}, 403),
    ("405 v1", "put", GENERATIONS, {}, 405),
    ("405 files", "delete", FILE, {}, 405),
    ("431 v1", "get", "/v1/models", {"HTTP_X_PADDING": BIG_HEADER}, 431),
    ("431 files", "get", FILE, {"HTTP_X_PADDING": BIG_HEADER}, 431),
    ("414 v1", "get", "/v1/models?" + "q=" + "x" * 6000, {}, 414),
    ("414 files", "get", FILE + "?" + "q=" + "x" * 6000, {}, 414),
    ("400 v1 NUL in path", "get", "/v1/models/a%00b", {}, 400),
    ("400 v1 NUL in query", "get", "/v1/models?q=a%00b", {}, 400),
    ("400 files NUL in path", "get", FILE + "%00", {}, 400),
    (
        "413 v1",
        "post",
        GENERATIONS,
        {"data": b"{}" + b" " * (2 * 1024 * 1024), "content_type": "application/json"},
        413,
    ),
    (
        "413 files",
        "post",
        FILE,
        {"data": b"{}" + b" " * (2 * 1024 * 1024), "content_type": "application/json"},
        413,
    ),
    ("400 v1 host", "get", "/v1/models", {"HTTP_HOST": "evil.example"}, 400),
    ("400 files host", "get", FILE, {"HTTP_HOST": "evil.example"}, 400),
    ("400 v1 json", "post", GENERATIONS, {"data": b"{not json", "content_type": "application/json"}, None),
]


@pytest.mark.parametrize(
    ("name", "method", "path", "extra", "status"), CASES, ids=[case[0] for case in CASES]
)
def test_every_error_under_v1_and_files_is_json(csrf_client, name, method, path, extra, status):
    response = getattr(csrf_client, method)(path, **extra)
    if status is None:  # the v1 call needs a key first: whichever refusal comes, it is JSON
        assert response.status_code in (400, 401)
        status = response.status_code
    _assert_json_error(response, status)


@pytest.mark.parametrize("path", [FILE, GENERATIONS])
def test_a_cookie_carrying_post_without_a_csrf_token_is_answered_in_json(csrf_client, path):
    response = csrf_client.post(path, data=b"{}", content_type="application/json")

    # No cookie authenticates these paths, so there is no CSRF check to fail; the answer is JSON.
    assert response.status_code in (401, 405)
    _assert_json_error(response, response.status_code)


@pytest.mark.parametrize("path", [FILE, GENERATIONS, "/v1"])
def test_the_csrf_failure_view_answers_json_under_v1_and_files(path):
    response = csrf_failure(RequestFactory().post(path), reason="CSRF cookie not set.")

    body = _assert_json_error(response, 403)
    assert body["error"]["code"] == "csrf_failed"


def test_the_csrf_failure_view_keeps_djangos_page_for_the_console(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)

    response = client.post("/console/keys/", {"label": "x"})

    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")


def test_a_console_page_with_an_oversized_header_is_refused_431_in_plain_text(client):
    response = client.get("/accounts/login/", HTTP_X_PADDING=BIG_HEADER)

    assert response.status_code == 431
    assert response["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize(
    "path",
    ["/console/playground/chat/usage/a%00b/", "/admin/groups/group/?billing__exact=%00"],
    ids=["console path", "admin filter"],
)
def test_a_nul_in_a_browser_pages_path_or_query_is_refused_400_in_plain_text(staff_client, path):
    """Passed on to a query, PostgreSQL would refuse the NUL: a 500."""
    response = staff_client.get(path)

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert b"NUL character" in response.content


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the server shares the test database")
@pytest.mark.django_db(transaction=True)
def test_gunicorn_passes_an_oversized_header_to_the_gateway_which_answers_json(tmp_path):
    with gunicorn_serving(log_path=tmp_path / "gunicorn.log") as base_url:
        big = requests.get(f"{base_url}/v1/models", headers={"X-Padding": BIG_HEADER}, timeout=10)
        long_line = requests.get(f"{base_url}/v1/models?q={'x' * 6000}", timeout=10)

    assert big.status_code == 431
    assert big.headers["Content-Type"] == "application/json"
    assert big.json()["error"]["code"] == "request_header_fields_too_large"
    assert long_line.status_code == 414
    assert long_line.headers["Content-Type"] == "application/json"
