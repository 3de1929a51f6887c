"""Any value in any request header the gateway reads: never a 5xx, a refusal in the endpoint's error
shape, and no money lost (no hold left open, the ledger's invariants kept).

A header value reaches the application as gunicorn delivers it: the bytes of the line decoded as
Latin-1, without the controls it refuses (everything below 0x20 but HTAB, and DEL) and without spaces
at either end. Hypothesis sets, replaces or drops the headers each endpoint's code reads (the
credential headers, Idempotency-Key, X-Request-Id, the Anthropic headers passed upstream,
Content-Type, the forwarding headers), on every /v1 call, streamed and not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import encode_multipart
from hypothesis import given
from hypothesis import strategies as st

from billing.ledger import wallet_top_up
from billing.models import Hold
from billing.selectors import ledger_check
from keys.services import api_key_create
from tests.factories import image_model_make, text_model_make
from tests.fuzz_values import fuzz_settings
from tests.images.conftest import image_bytes

pytestmark = pytest.mark.django_db

# What gunicorn hands over in a header value (RFC 9110's field-vchar, obs-text and inner SP/HTAB).
HEADER_CHARS = st.characters(
    codec="latin-1", exclude_characters=[chr(c) for c in [*range(32), 127] if c != 9]
)
HEADERS = [
    "Authorization", "x-api-key", "x-goog-api-key", "Idempotency-Key", "X-Request-Id",
    "anthropic-version", "anthropic-beta", "Content-Type", "Accept", "X-Forwarded-For",
    "X-Forwarded-Proto", "X-Forwarded-Host", "Origin",
]  # fmt: skip


def header_values(key: str) -> st.SearchStrategy[str]:
    """Any value gunicorn delivers, leaning on the ones the gateway gives a meaning to."""
    meaningful = [
        key, f"Bearer {key}", f"bearer  {key}", f"Bearer {key},Bearer {key}", f"Basic {key}", "Bearer",
        f"Bearer {key}\xff", "2023-06-01", "prompt-caching-2024-07-31,x", "application/json",
        "application/json; charset=latin-1", "application/json; charset=utf-16", "multipart/form-data",
        "multipart/form-data; boundary=", "text/event-stream", "https", "http, https", "127.0.0.1",
        "::1", "example.com:99999", "a" * 300, "\xe9" * 65, "9" * 40, "",
    ]  # fmt: skip
    return (st.sampled_from(meaningful) | st.text(HEADER_CHARS, max_size=40)).map(lambda v: v.strip(" \t"))


def header_changes(key: str) -> st.SearchStrategy[dict[str, str | None]]:
    """One to three headers set to any value, or dropped (None)."""
    return st.dictionaries(st.sampled_from(HEADERS), st.none() | header_values(key), min_size=1, max_size=3)


CHAT = {"model": "fuzz-chat", "messages": [{"role": "user", "content": "hi"}]}
CALLS: dict[str, tuple[dict[str, Any], str]] = {
    # path: (a valid body, the error shape)
    "/v1/chat/completions": (CHAT, "compatible"),
    "/v1/responses": ({"model": "fuzz-chat", "input": "hi"}, "compatible"),
    "/v1/messages": ({**CHAT, "max_tokens": 32}, "native"),
    "/v1/messages/count_tokens": (CHAT, "native"),
    "/v1/images/generations": ({"model": "fuzz-image", "prompt": "a red square"}, "compatible"),
}
BOUNDARY = "fuzz-boundary"
FUZZ = fuzz_settings()


@pytest.fixture
def key(alice, alpha_group, demo_upstream):
    """alice's key for a group with an image and a text model of the demo upstream."""
    text_model_make(model_id="fuzz-chat", group=alpha_group, upstreams=[demo_upstream])
    image_model_make(model_id="fuzz-image", group=alpha_group, upstreams=[demo_upstream])
    wallet_top_up(account=alice, amount="1000.00", reference="fuzz")
    return api_key_create(account=alice, group=alpha_group, label="fuzz")[1]


def with_changes(base: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    headers = dict(base)
    for name, value in changes.items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return headers


def posted(client, path: str, body: bytes, headers: dict[str, str]):
    """POST these bytes with exactly these headers: a Content-Type given in `headers` replaces the
    test client's own (its `content_type` would also re-encode the body for a charset it names)."""
    return client.post(path, data=body, content_type="", headers=headers)


def assert_answered_well(response, shape: str) -> None:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        payload = response.json()
        if shape == "native":
            assert payload["type"] == "error", payload
        error = payload["error"]
        assert isinstance(error["type"], str) and error["type"]
        assert isinstance(error["message"], str) and error["message"]
    elif response.streaming:
        stream = b"".join(response.streaming_content)
        assert stream.startswith((b"data: ", b"event: ")), stream[:200]
    else:
        assert isinstance(response.json(), dict | list)
    assert not Hold.objects.filter(status=Hold.Status.OPEN).exists()
    assert ledger_check() == []


@pytest.mark.parametrize("path", list(CALLS))
@pytest.mark.parametrize("stream", [False, True])
@FUZZ
@given(data=st.data())
def test_any_header_value_on_a_call_is_never_a_server_error(client, key, path, stream, data):
    body, shape = CALLS[path]
    if stream and path != "/v1/messages/count_tokens":
        body = {**body, "stream": True}
    changes = data.draw(header_changes(key))
    headers = with_changes({"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, changes)
    response = posted(client, path, json.dumps(body).encode(), headers)
    assert_answered_well(response, shape)


@FUZZ
@given(data=st.data())
def test_any_header_value_on_an_edit_is_never_a_server_error(client, key, data):
    changes = data.draw(header_changes(key))
    base = {"Authorization": f"Bearer {key}", "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    headers = with_changes(base, changes)
    image = SimpleUploadedFile("square.png", image_bytes(), content_type="image/png")
    body = encode_multipart(BOUNDARY, {"model": "fuzz-image", "prompt": "a red square", "image": image})
    response = posted(client, "/v1/images/edits", body, headers)
    assert_answered_well(response, "compatible")


@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/fuzz-chat", "/v1/me"])
@FUZZ
@given(data=st.data())
def test_any_header_value_on_a_read_is_never_a_server_error(client, key, path, data):
    headers = with_changes({"Authorization": f"Bearer {key}"}, data.draw(header_changes(key)))
    response = client.get(path, headers=headers)
    assert_answered_well(response, "compatible")


@FUZZ
@given(data=st.data())
def test_any_header_value_on_an_admin_top_up_is_never_a_server_error(client, staff, alpha_group, alice, data):
    staff.account.allowed_groups.add(alpha_group)
    staff_key = api_key_create(account=staff.account, group=alpha_group)[1]
    changes = data.draw(header_changes(staff_key))
    headers = with_changes(
        {"Authorization": f"Bearer {staff_key}", "Content-Type": "application/json"}, changes
    )
    body = json.dumps({"amount": "1.00", "note": "fuzz"}).encode()
    response = posted(client, f"/v1/admin/accounts/{alice.pk}/topups", body, headers)
    assert_answered_well(response, "compatible")
