"""A key's `models` list: on every billed endpoint (and token counting) a model it does not name is 403
`model_not_allowed` in the endpoint's error shape, refused before anything is reserved; GET /v1/models
lists only the models it names, and /v1/models/{id} of another answers as if it did not exist."""

from __future__ import annotations

import json

import pytest
import responses as responses_lib

from billing.models import Hold, LedgerEntry, UsageRecord, Wallet
from keys.models import ApiKey
from keys.services import ApiKeyLimitsInput, api_key_create, api_key_limits_set
from tests.chat.conftest import KEY_ENV, OPENAI_BASE, PROVIDER_KEY
from tests.factories import text_model_make, upstream_make
from tests.keys.admission import (
    ENDPOINTS,
    IMAGE_MODEL,
    OTHER_IMAGE_MODEL,
    OTHER_TEXT_MODEL,
    TEXT_MODEL,
    Endpoint,
    admission_models_make,
    error_of,
)
from tests.keys.conftest import bearer

pytestmark = pytest.mark.django_db


@pytest.fixture
def models(alpha_group, alpha_model, demo_upstream):
    admission_models_make(group=alpha_group, upstream=demo_upstream)


def limited_key(account, group, model_ids) -> tuple[ApiKey, str]:
    return api_key_create(
        account=account, group=group, label="limited", limits=ApiKeyLimitsInput(model_ids=model_ids)
    )


def allowed_and_other(endpoint: Endpoint) -> tuple[str, str]:
    if endpoint.family == "image":
        return IMAGE_MODEL, OTHER_IMAGE_MODEL
    return TEXT_MODEL, OTHER_TEXT_MODEL


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda endpoint: endpoint.name)
def test_a_model_the_key_does_not_name_is_refused_403_in_the_endpoints_shape(
    client, alice, alpha_group, models, endpoint
):
    _, key = limited_key(alice, alpha_group, [IMAGE_MODEL, TEXT_MODEL])
    allowed, other = allowed_and_other(endpoint)
    start = Wallet.objects.get(account=alice).balance

    refused = endpoint.call(client, key, other, headers={"X-Request-Id": "req-refused"})

    assert refused.status_code == 403, refused.content
    error_type, code, message = error_of(refused, native=endpoint.native)
    assert (error_type, code) == ("permission_error", "model_not_allowed")
    assert f"may not call the model '{other}'" in message
    if not endpoint.native:
        assert refused.json()["error"]["param"] == "model"
    # Refused before anything was reserved: no hold, no charge, the refusal recorded as such.
    assert not Hold.objects.exists()
    assert Wallet.objects.get(account=alice).balance == start
    assert UsageRecord.objects.get(request_id="req-refused").error_code == "model_not_allowed"

    served = endpoint.call(client, key, allowed)

    assert served.status_code == 200, served.content
    charges = LedgerEntry.objects.filter(kind="charge").count()
    assert charges == (1 if endpoint.billed else 0)


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda endpoint: endpoint.name)
def test_a_key_without_a_list_calls_every_model_of_its_group(client, alice, alpha_group, models, endpoint):
    _, key = limited_key(alice, alpha_group, [])

    response = endpoint.call(client, key, allowed_and_other(endpoint)[1])

    assert response.status_code == 200, response.content


def test_an_unknown_model_is_still_404_for_a_key_with_a_list(client, alice, alpha_group, models):
    _, key = limited_key(alice, alpha_group, [TEXT_MODEL])

    response = ENDPOINTS[2].call(client, key, "no-such-model")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_the_model_list_shows_only_the_models_the_key_names(client, alice, alpha_group, models):
    _, key = limited_key(alice, alpha_group, [IMAGE_MODEL, TEXT_MODEL])
    _, unlimited = limited_key(alice, alpha_group, [])

    listed = client.get("/v1/models", headers=bearer(key))
    everything = client.get("/v1/models", headers=bearer(unlimited))
    anthropic = client.get("/v1/models", headers={**bearer(key), "anthropic-version": "2023-06-01"})

    assert [item["id"] for item in listed.json()["data"]] == [IMAGE_MODEL, TEXT_MODEL]
    assert [item["id"] for item in everything.json()["data"]] == sorted(
        [IMAGE_MODEL, OTHER_IMAGE_MODEL, TEXT_MODEL, OTHER_TEXT_MODEL]
    )
    assert [item["id"] for item in anthropic.json()["data"]] == [IMAGE_MODEL, TEXT_MODEL]


@pytest.mark.parametrize("anthropic", [False, True])
def test_another_models_detail_answers_as_if_it_did_not_exist(client, alice, alpha_group, models, anthropic):
    _, key = limited_key(alice, alpha_group, [TEXT_MODEL])
    headers = {**bearer(key), **({"anthropic-version": "2023-06-01"} if anthropic else {})}

    named = client.get(f"/v1/models/{TEXT_MODEL}", headers=headers)
    other = client.get(f"/v1/models/{OTHER_TEXT_MODEL}", headers=headers)
    unknown = client.get("/v1/models/no-such-model", headers=headers)

    assert named.status_code == 200 and named.json()["id"] == TEXT_MODEL
    assert other.status_code == unknown.status_code == 404
    other_error, unknown_error = error_of(other, native=anthropic), error_of(unknown, native=anthropic)
    assert other_error[:2] == unknown_error[:2]
    # The same message but for the id (and the request id at its end).
    assert (
        other_error[2].replace(OTHER_TEXT_MODEL, "?").split("(request id")[0]
        == (unknown_error[2].replace("no-such-model", "?").split("(request id")[0])
    )
    if not anthropic:
        assert other_error[:2] == ("invalid_request_error", "model_not_found")


@pytest.fixture
def translated_model(alpha_group, monkeypatch):
    """A text model served by a chat-completions upstream: /v1/messages reaches it through a
    translator."""
    monkeypatch.setenv(KEY_ENV, PROVIDER_KEY)
    upstream = upstream_make(name="openai-main", base_url=OPENAI_BASE, api_key_env=KEY_ENV, kind="openai")
    return text_model_make(
        model_id="alpha-translated", group=alpha_group, upstreams=[upstream], upstream_model="vendor-chat-1"
    )


def test_a_translated_route_counts_by_the_model_id_the_caller_named(
    client, alice, alpha_group, models, translated_model
):
    _, named = limited_key(alice, alpha_group, ["alpha-translated"])
    _, not_named = limited_key(alice, alpha_group, [TEXT_MODEL, "vendor-chat-1"])
    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "vendor-chat-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    messages = ENDPOINTS[4]

    with responses_lib.RequestsMock() as upstream:
        upstream.add("POST", f"{OPENAI_BASE}/chat/completions", json=body)
        served = messages.call(client, named, "alpha-translated")
        refused = messages.call(client, not_named, "alpha-translated")
        assert len(upstream.calls) == 1

    assert served.status_code == 200, served.content
    assert json.loads(served.content)["type"] == "message"
    assert refused.status_code == 403
    assert error_of(refused, native=True)[:2] == ("permission_error", "model_not_allowed")


@pytest.mark.django_db(transaction=True)
def test_a_changed_list_applies_from_the_next_call(client, alice, alpha_group, models):
    api_key, key = limited_key(alice, alpha_group, [IMAGE_MODEL])
    chat = ENDPOINTS[2]
    assert chat.call(client, key, TEXT_MODEL).status_code == 403

    api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput(model_ids=[IMAGE_MODEL, TEXT_MODEL]))

    assert chat.call(client, key, TEXT_MODEL).status_code == 200
    assert [item["id"] for item in client.get("/v1/models", headers=bearer(key)).json()["data"]] == [
        IMAGE_MODEL,
        TEXT_MODEL,
    ]

    api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput())

    assert chat.call(client, key, OTHER_TEXT_MODEL).status_code == 200
