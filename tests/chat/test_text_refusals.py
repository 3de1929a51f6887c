"""The refusals every text endpoint gives before any upstream call: no credential, a model of another
group, an output limit over the model's, a balance that does not cover the ceiling, a bad body."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from billing.ledger import wallet_adjust
from billing.models import Hold, UsageRecord, Wallet
from chat.families import FAMILIES
from chat.validation import text_body_parse
from groups.services import group_upsert
from keys.models import ApiKey
from tests.factories import text_model_make
from tests.rate_windows import rate_window_wait

pytestmark = pytest.mark.django_db

# (path, a model of the family, its limit field or None)
ENDPOINTS = [
    ("/v1/chat/completions", "alpha-chat", "max_tokens"),
    ("/v1/responses", "alpha-chat", "max_output_tokens"),
    ("/v1/messages", "alpha-claude", "max_tokens"),
    ("/v1/messages/count_tokens", "alpha-claude", None),
]
NATIVE = {"/v1/messages", "/v1/messages/count_tokens"}


@pytest.fixture
def models(chat_model, claude_model):
    return chat_model, claude_model


def post(client, path, body, headers=None, raw=None):
    return client.post(
        path,
        data=raw if raw is not None else json.dumps(body),
        content_type="application/json",
        headers=headers or {},
    )


def error_of(path, response) -> dict:
    body = response.json()
    if path in NATIVE:
        assert body["type"] == "error"
        return body["error"]
    return body["error"]


def test_every_family_has_a_row_here():
    assert {family.path for family in FAMILIES} == {path for path, _, _ in ENDPOINTS}


@pytest.mark.parametrize(("path", "model", "limit"), ENDPOINTS)
def test_a_call_without_a_credential_is_401_in_the_familys_shape(
    client, upstream, models, path, model, limit
):
    response = post(client, path, {"model": model})

    assert response.status_code == 401
    assert error_of(path, response)["type"] == "authentication_error"
    assert len(upstream.calls) == 0


@pytest.mark.parametrize(("path", "model", "limit"), ENDPOINTS)
@pytest.mark.parametrize("header", ["Authorization", "x-api-key", "x-goog-api-key"])
def test_each_credential_header_works_on_every_endpoint(
    client, upstream, models, tara_key, path, model, limit, header
):
    value = f"Bearer {tara_key}" if header == "Authorization" else tara_key
    response = post(client, path, {"model": model, "stream": "yes"}, headers={header: value})

    # Authenticated: refused for the body, not the credential.
    assert response.status_code == 400, response.content
    assert len(upstream.calls) == 0


@pytest.mark.parametrize(("path", "model", "limit"), ENDPOINTS)
def test_a_model_of_another_group_is_403_and_an_unknown_one_404(
    client, upstream, models, tara_key, openai_upstream, path, model, limit
):
    other, _ = group_upsert(
        group_id=8,
        name="Other",
        status="active",
        image_enabled=False,
        billing="balance",
        allow_group_override=False,
        rpm=0,
        concurrency=0,
    )
    text_model_make(model_id="other-chat", group=other, upstreams=[openai_upstream])
    headers = {"Authorization": f"Bearer {tara_key}"}

    forbidden = post(client, path, {"model": "other-chat"}, headers)
    missing = post(client, path, {"model": "no-such-model"}, headers)

    assert forbidden.status_code == 403
    assert error_of(path, forbidden)["type"] == "permission_error"
    assert missing.status_code == 404
    assert error_of(path, missing)["type"] == (
        "not_found_error" if path in NATIVE else "invalid_request_error"
    )
    assert len(upstream.calls) == 0


@pytest.mark.parametrize(("path", "model", "limit"), [e for e in ENDPOINTS if e[2]])
def test_an_output_limit_over_the_models_is_400(client, upstream, models, tara_key, path, model, limit):
    response = post(client, path, {"model": model, limit: 5000}, {"Authorization": f"Bearer {tara_key}"})

    assert response.status_code == 400
    error = error_of(path, response)
    assert error["type"] == "invalid_request_error"
    assert limit in error["message"]
    assert len(upstream.calls) == 0


@pytest.mark.parametrize(("path", "model", "limit"), [e for e in ENDPOINTS if e[2]])
@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True])
def test_an_output_limit_that_is_not_a_positive_integer_is_400(
    client, upstream, models, tara_key, path, model, limit, value
):
    response = post(client, path, {"model": model, limit: value}, {"Authorization": f"Bearer {tara_key}"})

    assert response.status_code == 400
    assert len(upstream.calls) == 0


@pytest.mark.parametrize(("path", "model", "limit"), [e for e in ENDPOINTS if e[2]])
def test_a_balance_that_does_not_cover_the_ceiling_is_403_before_the_upstream(
    client, upstream, models, tara, tara_key, path, model, limit
):
    wallet_adjust(account=tara, amount=Decimal("-0.999"), note="leave ¥0.001")
    # Ceiling: at least 1000 tokens of overhead and 1000+ output tokens at ¥8-15 per million > ¥0.001.
    response = post(client, path, {"model": model, "messages": []}, {"Authorization": f"Bearer {tara_key}"})

    assert response.status_code == 403
    error = error_of(path, response)
    assert error["type"] == "billing_error"
    assert "INSUFFICIENT_BALANCE" in json.dumps(response.json())
    assert len(upstream.calls) == 0
    assert not Hold.objects.exists()
    assert Wallet.objects.get(account=tara).balance == Decimal("0.001")
    assert UsageRecord.objects.get().error_code == "INSUFFICIENT_BALANCE"


@pytest.mark.parametrize(("path", "model", "limit"), ENDPOINTS)
@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        b'{"model": 5}',
        b'{"model": "x", "stream": "yes"}',
        b"[" * 100_000,
        b'{"a": NaN}',
    ],
)
def test_a_body_that_is_not_what_the_gateway_needs_is_400(
    client, upstream, models, tara_key, path, model, limit, raw
):
    response = post(client, path, None, {"Authorization": f"Bearer {tara_key}"}, raw=raw)

    assert response.status_code == 400
    assert error_of(path, response)["type"] == "invalid_request_error"
    assert len(upstream.calls) == 0


@pytest.mark.parametrize(("path", "model", "limit"), ENDPOINTS)
@pytest.mark.parametrize("lone", [r"\udfff", r"\ud800", r"x\uDBFF", r"\ude42\ud83d"])
def test_a_string_holding_an_unpaired_surrogate_is_400_invalid_json(
    client, upstream, models, tara, tara_key, path, model, limit, lone
):
    raw = json.dumps({"model": model, "metadata": {"k": "LONE"}, "messages": []}).replace("LONE", lone)

    response = post(client, path, None, {"Authorization": f"Bearer {tara_key}"}, raw=raw.encode())

    assert response.status_code == 400
    error = error_of(path, response)
    assert (error["type"], "unpaired surrogate" in error["message"]) == ("invalid_request_error", True)
    assert len(upstream.calls) == 0
    assert UsageRecord.objects.get(account=tara).status == 400


def test_an_escaped_surrogate_pair_is_one_character_and_passes():
    parsed = text_body_parse(raw=rb'{"model": "m", "metadata": {"k": "\ud83d\ude42"}}', family=FAMILIES[0])

    assert parsed.body["metadata"]["k"] == "\U0001f642"


def test_a_body_over_the_size_limit_is_413(client, upstream, models, tara_key, settings):
    settings.GATEWAY_MAX_JSON_BODY_BYTES = 2048
    body = {"model": "alpha-chat", "messages": [{"role": "user", "content": "x" * 4096}]}
    response = post(client, "/v1/chat/completions", body, {"Authorization": f"Bearer {tara_key}"})

    assert response.status_code == 413
    assert len(upstream.calls) == 0


def test_count_tokens_is_rate_limited(client, upstream, models, tara_key, chat_group):
    upstream.post("https://api.anthropic.test/v1/messages/count_tokens", json={"input_tokens": 3})
    chat_group.rpm = 1
    chat_group.save()
    rate_window_wait(f"api_key:{ApiKey.objects.get().pk}")
    headers = {"x-api-key": tara_key}
    body = {"model": "alpha-claude", "messages": []}

    assert post(client, "/v1/messages/count_tokens", body, headers).status_code == 200
    limited = post(client, "/v1/messages/count_tokens", body, headers)

    assert limited.status_code == 429
    assert limited.json()["error"]["type"] == "rate_limit_error"
    assert len(upstream.calls) == 1


@pytest.mark.parametrize(("path", "model", "limit"), ENDPOINTS)
@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "text/plain; charset=utf-16",
        "application/jsonx",
    ],
)
def test_a_body_that_is_not_json_is_415_in_the_familys_shape(
    client, upstream, models, tara_key, path, model, limit, content_type
):
    response = client.post(
        path,
        data=json.dumps({"model": model}),
        content_type=content_type,
        headers={"Authorization": f"Bearer {tara_key}"},
    )

    assert response.status_code == 415, response.content
    error = error_of(path, response)
    assert error["type"] == "invalid_request_error"
    assert "application/json" in error["message"]
    assert content_type.split(";")[0] in error["message"]
    if path not in NATIVE:
        assert error["code"] == "unsupported_content_type"
    assert len(upstream.calls) == 0
    assert not Hold.objects.exists()


@pytest.mark.parametrize(("path", "model", "limit"), ENDPOINTS)
@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON", ""])
def test_a_json_body_is_read_with_any_charset_parameter_or_without_a_content_type(
    client, upstream, models, tara_key, path, model, limit, content_type
):
    response = client.generic(
        "POST",
        path,
        json.dumps({"model": "no-such-model"}),
        content_type=content_type,
        headers={"Authorization": f"Bearer {tara_key}"},
    )

    # Read as JSON: refused for its model, not its media type.
    assert response.status_code == 404, response.content
    assert UsageRecord.objects.get().model_id == "no-such-model"


def test_a_text_call_without_a_credential_is_401_whatever_its_content_type(client, upstream, models):
    response = client.post("/v1/chat/completions", data="x", content_type="text/plain")

    assert response.status_code == 401
