"""The error model: the three body shapes built by core/errors.py, and JSON (never HTML,
never a traceback) for every way a /v1 request can fail."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver

from core.errors import (
    GROUP_DISABLED,
    ApiError,
    AuthenticationFailed,
    PassthroughError,
    PermissionDenied,
    RateLimited,
    error_response,
)
from tests.keys.conftest import assert_compatible_error, bearer

pytestmark = pytest.mark.django_db


def body_of(response) -> dict:
    return json.loads(response.content)


def api_request(path: str, request_id: str = "req_test123"):
    request = RequestFactory().get(path)
    request.request_id = request_id
    return request


# --- the builders ----------------------------------------------------------------------------------------


def test_it_builds_the_compatible_shape_for_image_and_openai_style_paths():
    for path in ("/v1/images/generations", "/v1/chat/completions", "/v1/responses", "/v1/models", "/v1/me"):
        response = error_response(
            PermissionDenied("The group is disabled.", code=GROUP_DISABLED), request=api_request(path)
        )

        assert response.status_code == 403
        assert body_of(response) == {
            "error": {
                "message": "The group is disabled. (request id: req_test123)",
                "type": "permission_error",
                "param": None,
                "code": "GROUP_DISABLED",
            }
        }
        assert "x-error-code" not in response


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_it_builds_the_native_shape_with_the_code_in_the_message_and_a_header(path):
    response = error_response(
        PermissionDenied("The group is disabled.", code=GROUP_DISABLED), request=api_request(path)
    )

    assert response.status_code == 403
    assert body_of(response) == {
        "type": "error",
        "error": {
            "type": "permission_error",
            "message": "GROUP_DISABLED: The group is disabled. (request id: req_test123)",
        },
    }
    assert response["x-error-code"] == "GROUP_DISABLED"


def test_it_builds_the_second_native_shape_on_request():
    response = error_response(
        PermissionDenied("No access.", code="model_not_allowed"),
        request=api_request("/v1/images/generations"),
        shape="google",
    )

    assert body_of(response) == {
        "error": {
            "code": 403,
            "message": "No access. (request id: req_test123)",
            "status": "permission_denied",
        }
    }


def test_it_passes_an_upstream_body_through_unchanged():
    body = {"error": {"code": 429, "message": "Quota exceeded.", "status": "resource_exhausted"}}
    error = PassthroughError(status=429, body=body, message="Quota exceeded.", shape="google")

    response = error_response(error, request=api_request("/v1/images/generations"))

    assert response.status_code == 429
    assert body_of(response) == body
    assert response["Retry-After"] == "1"


def test_it_sets_retry_after_on_429_and_503_and_www_authenticate_on_401():
    limited = error_response(RateLimited("Slow down.", retry_after=0.2), request=api_request("/v1/models"))
    assert limited["Retry-After"] == "1"  # never 0
    unauthenticated = error_response(
        AuthenticationFailed("No key.", code="missing_api_key"), request=api_request("/v1/models")
    )
    assert unauthenticated["WWW-Authenticate"].startswith("Bearer")
    assert "Retry-After" not in unauthenticated


RETRY_CASES = [
    (400, "false"),
    (401, "false"),
    (402, "false"),
    (403, "false"),
    (404, "false"),
    (408, None),  # a timeout: the SDKs' own retry may well succeed
    (409, "false"),
    (413, "false"),
    (422, "false"),
    (429, None),  # Retry-After says when
    (500, None),
    (502, "false"),  # the gateway has already spent its retries on the upstreams
    (503, None),  # Retry-After says when
    (504, "false"),
]


@pytest.mark.parametrize(("status", "header"), RETRY_CASES)
def test_it_tells_the_sdks_not_to_retry_what_retrying_cannot_fix(status, header):
    error = ApiError("No.", status=status)

    for path in ("/v1/images/generations", "/v1/messages"):
        response = error_response(error, request=api_request(path))
        assert response.get("x-should-retry") == header, (status, path)


@pytest.mark.parametrize(("status", "header"), RETRY_CASES)
def test_it_tells_the_sdks_not_to_retry_an_upstream_error_passed_through(status, header):
    body = {"error": {"message": "No.", "type": "invalid_request_error", "param": None, "code": None}}
    error = PassthroughError(status=status, body=body, message="No.", shape="compatible")

    assert error_response(error, request=api_request("/v1/chat/completions")).get("x-should-retry") == header


# --- over HTTP ------------------------------------------------------------------------------------------


def test_every_response_carries_a_request_id_and_keeps_a_sane_one(client, alice_key):
    ok = client.get("/v1/models", headers={**bearer(alice_key), "X-Request-Id": "client-42"})
    assert ok.status_code == 200
    assert ok["X-Request-Id"] == "client-42"

    refused = client.get("/v1/models", headers={"X-Request-Id": "bad id with spaces"})
    assert re.fullmatch(r"req_[0-9a-f]{32}", refused["X-Request-Id"])
    assert refused.json()["error"]["message"].endswith(f"(request id: {refused['X-Request-Id']})")


def test_it_answers_json_404_for_an_unknown_route(client):
    assert_compatible_error(
        client.get("/v1/no/such/route"), status=404, type_="invalid_request_error", code="route_not_found"
    )


def test_it_answers_the_native_shape_for_an_unknown_messages_route(client):
    response = client.post("/v1/messages/nope")

    assert response.status_code == 404
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "not_found_error"  # Anthropic's type for a 404
    assert response["x-error-code"] == "route_not_found"


@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
def test_it_answers_json_405_for_a_wrong_method_with_or_without_credentials(client, alice_key, method):
    for headers in ({}, bearer(alice_key)):
        response = getattr(client, method)("/v1/models", headers=headers)

        assert_compatible_error(
            response, status=405, type_="invalid_request_error", code="method_not_allowed"
        )
        assert response["Allow"] == "GET, HEAD, OPTIONS"


@pytest.mark.urls("tests.keys.error_urls")
def test_it_answers_json_400_for_an_unparseable_body(client, alice_key):
    response = client.post(
        "/v1/test/echo",
        data=b'{"model": "alpha-image-2",',
        content_type="application/json",
        headers=bearer(alice_key),
    )

    assert_compatible_error(response, status=400, type_="invalid_request_error", code="invalid_json")


@pytest.mark.urls("tests.keys.error_urls")
def test_it_parses_a_valid_body(client, alice_key):
    response = client.post(
        "/v1/test/echo",
        data={"model": "alpha-image-2"},
        content_type="application/json",
        headers=bearer(alice_key),
    )

    assert response.status_code == 200
    assert response.json() == {"received": {"model": "alpha-image-2"}}


@pytest.mark.urls("tests.keys.error_urls")
def test_it_answers_json_413_for_an_oversized_body(client, alice_key, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    body = b'{"prompt": "' + b"x" * 2048 + b'"}'

    response = client.post(
        "/v1/test/echo", data=body, content_type="application/json", headers=bearer(alice_key)
    )

    assert_compatible_error(response, status=413, type_="invalid_request_error", code="request_too_large")


@pytest.mark.urls("tests.keys.error_urls")
@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
@pytest.mark.parametrize("path", ["/v1/test/crash", "/v1/test/plain-crash", "/v1/test/plain-html-500"])
def test_it_answers_json_500_without_a_traceback(alice_key, settings, debug, path):
    settings.DEBUG = debug
    client = Client(raise_request_exception=False)

    response = client.get(path, headers=bearer(alice_key))

    error = assert_compatible_error(response, status=500, type_="api_error", code="internal_error")
    assert "Traceback" not in response.content.decode()
    assert "boom" not in error["message"]


@pytest.mark.urls("tests.keys.error_urls")
def test_it_answers_429_and_503_with_retry_after(client, alice_key):
    limited = client.get("/v1/test/slow-down", headers=bearer(alice_key))
    assert_compatible_error(limited, status=429, type_="rate_limit_error", code="rate_limit_exceeded")
    assert limited["Retry-After"] == "3"

    overloaded = client.get("/v1/test/overloaded", headers=bearer(alice_key))
    assert_compatible_error(overloaded, status=503, type_="upstream_error", code="overloaded")
    assert overloaded["Retry-After"] == "1"


@pytest.mark.urls("tests.keys.error_urls")
def test_a_view_picks_its_shape_with_error_shape(client, alice_key):
    native = client.get("/v1/test/native", headers=bearer(alice_key))
    assert native.status_code == 402
    assert native.json()["type"] == "error"
    assert native.json()["error"]["type"] == "billing_error"
    assert native.json()["error"]["message"].startswith("INSUFFICIENT_BALANCE: Balance too low.")
    assert native["x-error-code"] == "INSUFFICIENT_BALANCE"

    google = client.get("/v1/test/google", headers=bearer(alice_key))
    assert google.json()["error"]["code"] == 403
    assert google.json()["error"]["status"] == "permission_denied"


@pytest.mark.urls("tests.keys.error_urls")
def test_a_view_with_its_own_shape_answers_authentication_errors_in_it(client):
    response = client.get("/v1/test/native")

    assert response.status_code == 401
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "authentication_error"
    assert response["x-error-code"] == "missing_api_key"


# --- every /v1 endpoint ---------------------------------------------------------------------------------


def _v1_routes() -> list[str]:
    def walk(patterns, prefix: str):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern):
                yield route

    routes = []
    for route in walk(get_resolver().url_patterns, ""):
        if route.startswith("v1/"):
            routes.append("/" + re.sub(r"<(?:\w+:)?\w+>", "1", route))
    return routes


def test_every_v1_endpoint_answers_errors_in_its_shape(client):
    routes = _v1_routes()
    assert {"/v1/models", "/v1/me"} <= set(routes)
    for path in routes:
        for method in ("get", "post"):
            if (method, path) == ("get", "/v1/openapi.json"):
                continue  # the API's description, public by design (tests/api/test_openapi.py)
            response = getattr(client, method)(path)
            assert response.status_code in (401, 405), (method, path, response.status_code)
            assert response["Content-Type"] == "application/json", (method, path)
            body = response.json()
            if path.startswith("/v1/messages"):
                assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, path
            else:
                assert set(body) == {"error"}, (method, path)
                assert set(body["error"]) == {"message", "type", "param", "code"}, (method, path)
            if response.status_code == 401:
                assert body["error"]["type"] == "authentication_error"
