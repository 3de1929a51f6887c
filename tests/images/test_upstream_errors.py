"""upstream_error_to_api_error: the caller's answer for each upstream failure, rendered by errors.py."""

from __future__ import annotations

import json

import pytest

from api.upstream_errors import upstream_error_to_api_error
from core.errors import PassthroughError, error_response
from tests.images.conftest import OPENAI_KEY
from upstreams.providers.base import UpstreamError

pytestmark = pytest.mark.django_db


def answered(upstream, **error_kwargs) -> tuple[int, dict, object]:
    api_error = upstream_error_to_api_error(error=UpstreamError("x", **error_kwargs), upstream=upstream)
    response = error_response(api_error, request=None)
    return response.status_code, json.loads(response.content), api_error


@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_a_request_error_passes_through_in_the_openai_shape(openai_upstream, status):
    body = {
        "error": {
            "message": "Invalid size '1x1'. Supported sizes are 1024x1024, 1024x1536.",
            "type": "invalid_request_error",
            "param": "size",
            "code": "invalid_value",
        }
    }
    code, answer, api_error = answered(openai_upstream, status=status, retryable=False, body=body)
    assert isinstance(api_error, PassthroughError)
    assert code == status
    assert answer == body


def test_a_passed_through_message_loses_keys_urls_hosts_and_addresses(openai_upstream):
    message = (
        f"Bad request for key {OPENAI_KEY} at https://internal.provider.test/v1/images?sig=abc "
        "(host api.provider.test, backend 10.0.3.7:8080, token=abcd1234, Bearer eyJhbGciOi.xyz)"
    )
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    _, answer, _ = answered(openai_upstream, status=400, retryable=False, body=body)
    text = answer["error"]["message"]
    for leaked in (
        OPENAI_KEY,
        "internal.provider.test",
        "api.provider.test",
        "10.0.3.7",
        "abcd1234",
        "eyJhbGciOi",
    ):
        assert leaked not in text
    assert text.startswith("Bad request for key [redacted]")


def test_a_passed_through_message_keeps_indexes_and_loses_ipv6_addresses(openai_upstream):
    message = "messages[1].content[0] is invalid (backend [fd00::3]:8080, [::1])"
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}

    _, answer, _ = answered(openai_upstream, status=400, retryable=False, body=body)

    assert answer["error"]["message"] == "messages[1].content[0] is invalid (backend [redacted], [redacted])"


def test_a_passed_through_body_keeps_only_the_known_fields(openai_upstream):
    body = {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "n",
            "code": "x",
            "debug": "trace",
        },
        "request_url": "https://internal/",
    }
    _, answer, _ = answered(openai_upstream, status=400, retryable=False, body=body)
    assert answer == {"error": {"message": "bad", "type": "invalid_request_error", "param": "n", "code": "x"}}


def test_a_google_shaped_error_passes_through_in_its_shape(openai_upstream):
    body = {
        "error": {"code": 400, "message": "Prompt is empty.", "status": "INVALID_ARGUMENT", "details": [{}]}
    }
    code, answer, _ = answered(openai_upstream, status=400, retryable=False, body=body)
    assert (code, answer) == (
        400,
        # The spec's lowercase status, whatever case the upstream wrote it in.
        {"error": {"code": 400, "message": "Prompt is empty.", "status": "invalid_argument"}},
    )


def test_an_error_without_a_native_shape_is_answered_in_the_compatible_shape(openai_upstream):
    body = {"code": "Client specified an invalid argument", "error": "Prompt violates the content policy."}
    code, answer, _ = answered(openai_upstream, status=422, retryable=False, body=body)
    assert code == 422
    assert answer["error"]["message"] == "Prompt violates the content policy."
    assert answer["error"]["type"] == "invalid_request_error"


def test_an_html_error_page_is_not_shown_to_the_caller(openai_upstream):
    code, answer, _ = answered(
        openai_upstream, status=404, retryable=False, body="<html><h1>nginx: /srv/app not found</h1></html>"
    )
    assert code == 404
    assert "nginx" not in answer["error"]["message"]


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"status": 500, "retryable": True}, 502, "upstream_error"),
        ({"status": 503, "retryable": True}, 502, "upstream_error"),
        ({"status": 502, "retryable": True}, 502, "upstream_error"),
        ({"status": 504, "retryable": False, "sent": True}, 504, "upstream_timeout"),
        ({"status": None, "retryable": True}, 502, "upstream_unreachable"),
        ({"status": 401, "retryable": False}, 502, "upstream_auth_failed"),
        ({"status": 403, "retryable": False}, 502, "upstream_auth_failed"),
        ({"status": 402, "retryable": False}, 502, "upstream_error"),
        ({"status": 429, "retryable": True, "retry_after": 2.5}, 429, "upstream_rate_limited"),
    ],
)
def test_each_failure_class_gets_its_status(openai_upstream, kwargs, status, code):
    got_status, answer, api_error = answered(
        openai_upstream, body={"error": {"message": "internal detail"}}, **kwargs
    )
    assert (got_status, answer["error"]["code"]) == (status, code)
    assert "internal detail" not in answer["error"]["message"]
    if status == 429:
        assert api_error.headers["Retry-After"] == "3"
