"""A JSON body nested deeper than the parser can follow is a 400 invalid_json, never a 500."""

import logging

import pytest

from keys.services import api_key_create

pytestmark = pytest.mark.django_db

BODIES = {
    "arrays": b"[" * 100_000,
    "objects": b'{"a":' * 5_000,
}


@pytest.fixture
def key(alice, alpha_model):
    return api_key_create(account=alice, group=alpha_model.group, label="t")[1]


JSON_ENDPOINTS = ["/v1/images/generations", "/v1/chat/completions", "/v1/responses", "/v1/messages"]


@pytest.mark.parametrize("path", JSON_ENDPOINTS)
@pytest.mark.parametrize("shape", sorted(BODIES))
def test_it_answers_400_invalid_json_to_a_body_nested_too_deeply(client, key, caplog, path, shape):
    with caplog.at_level(logging.ERROR):
        response = client.post(
            path,
            data=BODIES[shape],
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    body = response.json()
    # /v1/messages answers in the native shape: the code rides in a header.
    assert body["error"].get("code", response.get("x-error-code")) == "invalid_json"
    assert not [record for record in caplog.records if record.exc_info]
