"""The `models:invoke` scope: an OAuth token calls models (and spends its account's money) only with
it. A manual key acts for its account in full, as before."""

from __future__ import annotations

import json
from decimal import Decimal
from urllib.parse import urlencode

import pytest

from api.errors import api_error_for
from billing.models import UsageRecord, Wallet
from keys.authentication import credential_verify
from keys.credentials import SCOPES
from keys.errors import ScopeMissing
from keys.group_access import models_invoke_check
from tests.keys.conftest import REDIRECT_URI, assert_compatible_error, bearer, pkce_pair
from tests.keys.test_oauth import run

pytestmark = pytest.mark.django_db

INVOKE = "models:invoke"
TEXT_CALLS = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/messages", {"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
]


def generate(client, secret: str, model: str = "alpha-image-2"):
    return client.post(
        "/v1/images/generations",
        data={"model": model, "prompt": "a fox", "size": "1024x1024"},
        content_type="application/json",
        headers=bearer(secret),
    )


def test_it_offers_models_invoke_among_the_scopes():
    assert INVOKE in SCOPES


@pytest.mark.parametrize("scopes", [[], ["profile:read", "account:read", "account:balance:read"]])
def test_it_refuses_a_billed_image_call_to_a_token_without_models_invoke(
    client, alice, alpha_model, token_for, scopes
):
    response = generate(client, token_for(alice, scopes))

    error = assert_compatible_error(response, status=403, type_="permission_error", code="insufficient_scope")
    assert INVOKE in error["message"]
    assert response.headers["x-should-retry"] == "false"
    assert Wallet.objects.get(account=alice).balance == Decimal("10")
    assert not UsageRecord.objects.filter(status=200).exists()


def test_it_serves_a_billed_image_call_to_a_token_with_models_invoke(client, alice, alpha_model, token_for):
    response = generate(client, token_for(alice, [INVOKE]))

    assert response.status_code == 200, response.content[:500]
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")


def test_it_refuses_an_override_to_a_token_without_models_invoke(client, carol, gamma_model, token_for):
    response = generate(client, token_for(carol, ["profile:read"]), model="3:gamma-image-1")

    assert_compatible_error(response, status=403, type_="permission_error", code="insufficient_scope")


@pytest.mark.parametrize(("path", "body"), TEXT_CALLS)
def test_it_refuses_every_text_endpoint_to_a_token_without_models_invoke(
    client, alice, token_for, path, body
):
    response = client.post(
        path,
        data=json.dumps({"model": "any-text-model", **body}),
        content_type="application/json",
        headers=bearer(token_for(alice, ["profile:read"])),
    )

    assert response.status_code == 403, response.content[:500]
    assert response.headers["x-should-retry"] == "false"
    if path.startswith("/v1/messages"):
        assert response.json()["error"]["type"] == "permission_error"
        assert response.headers["x-error-code"] == "insufficient_scope"
    else:
        assert response.json()["error"]["code"] == "insufficient_scope"


def test_it_lists_all_groups_only_for_a_token_with_models_invoke(client, carol, alpha_model, token_for):
    without = client.get("/v1/models?groups=all", headers=bearer(token_for(carol, ["profile:read"])))
    plain = client.get("/v1/models", headers=bearer(token_for(carol, ["profile:read"])))
    with_scope = client.get("/v1/models?groups=all", headers=bearer(token_for(carol, [INVOKE])))

    assert_compatible_error(without, status=403, type_="permission_error", code="insufficient_scope")
    assert [item["id"] for item in plain.json()["data"]] == ["alpha-image-2"]
    assert with_scope.status_code == 200


def test_a_prefixed_model_id_is_not_found_for_a_token_without_models_invoke(
    client, carol, gamma_model, token_for
):
    response = client.get("/v1/models/3:gamma-image-1", headers=bearer(token_for(carol, ["profile:read"])))

    assert response.status_code == 404


def test_the_check_passes_manual_keys_and_scoped_tokens_only(
    alice, alpha_model, key_for, token_for, alpha_group
):
    models_invoke_check(credential=credential_verify(secret=key_for(alice, alpha_group)))
    models_invoke_check(credential=credential_verify(secret=token_for(alice, [INVOKE])))
    with pytest.raises(ScopeMissing) as caught:
        models_invoke_check(credential=credential_verify(secret=token_for(alice, ["account:read"])))
    assert (api_error_for(caught.value).status, caught.value.code) == (403, "insufficient_scope")


def test_createtoken_issues_a_token_that_may_invoke_models(client, alice, alpha_model):
    out, _ = run("createtoken", "alice", "--scopes", INVOKE)

    assert generate(client, out.strip().splitlines()[-1]).status_code == 200


def test_the_consent_page_offers_models_invoke(client, alice, oauth_app):
    application, _ = oauth_app
    client.force_login(alice.user)
    _, challenge = pkce_pair()
    query = {
        "response_type": "code",
        "client_id": application.client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }

    invoking = client.get(f"/oauth/authorize/?{urlencode({**query, 'scope': INVOKE})}").content.decode()
    reading = client.get(
        f"/oauth/authorize/?{urlencode({**query, 'scope': 'profile:read'})}"
    ).content.decode()

    assert SCOPES[INVOKE] in invoking
    assert SCOPES[INVOKE] not in reading
