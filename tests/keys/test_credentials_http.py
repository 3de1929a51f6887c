"""The credential matrix over real HTTP (a live server and `requests`): every header kind, both
credential types, and every way a credential can be wrong."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from oauth2_provider.models import AccessToken

from keys.authentication import credential_verify
from keys.models import ApiKey
from keys.secrets import api_key_generate, oauth_access_token_generate
from keys.services import api_key_revoke, oauth_token_revoke
from tests.keys.conftest import assert_compatible_error, bearer

pytestmark = pytest.mark.django_db(transaction=True)

HEADER_KINDS = {
    "authorization": lambda secret: {"Authorization": f"Bearer {secret}"},
    "authorization_lowercase_scheme": lambda secret: {"Authorization": f"bearer {secret}"},
    "x_api_key": lambda secret: {"x-api-key": secret},
    "x_goog_api_key": lambda secret: {"x-goog-api-key": secret},
}


@pytest.mark.parametrize("header_kind", HEADER_KINDS)
def test_it_accepts_an_api_key_in_each_header_kind(live_api, alice_key, header_kind):
    response = live_api.get("/v1/models", headers=HEADER_KINDS[header_kind](alice_key))

    assert response.status_code == 200, response.text
    assert [item["id"] for item in response.json()["data"]] == ["alpha-image-2"]
    assert response.headers["X-Request-Id"].startswith("req_")
    assert ApiKey.objects.get().last_used_at is not None


@pytest.mark.parametrize("header_kind", HEADER_KINDS)
def test_it_accepts_an_oauth_token_in_each_header_kind(live_api, alice_token, header_kind):
    response = live_api.get("/v1/me", headers=HEADER_KINDS[header_kind](alice_token))

    assert response.status_code == 200, response.text
    assert response.json()["user"]["username"] == "alice"


def test_it_refuses_a_request_without_credentials(live_api, alice_key):
    response = live_api.get("/v1/models")

    assert_compatible_error(response, status=401, type_="authentication_error", code="missing_api_key")
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer "},
        {"x-api-key": ""},
        {"x-goog-api-key": ""},
    ],
    ids=["empty_bearer", "empty_x_api_key", "empty_x_goog_api_key"],
)
def test_it_treats_an_empty_credential_header_as_missing(live_api, alice_key, headers):
    response = live_api.get("/v1/models", headers=headers)

    assert_compatible_error(response, status=401, type_="authentication_error", code="missing_api_key")


@pytest.mark.parametrize(
    "credential",
    [
        "not-a-key",
        "sk-short",
        "sk-" + "A" * 49,
        "Basic dXNlcjpwYXNz",
        "sk_oauth_tooshort",
        "rt_oauth_" + "A" * 49,
    ],
    ids=["no_prefix", "too_short", "wrong_checksum_all_A", "basic_scheme", "short_oauth", "refresh_token"],
)
def test_it_refuses_a_malformed_credential(live_api, alice_key, credential):
    headers = {"Authorization": credential} if credential.startswith("Basic") else bearer(credential)

    response = live_api.get("/v1/models", headers=headers)

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")


def _flip_last_body_char(secret: str) -> str:
    # The body's last character sits just before the 6-character checksum.
    position = len(secret) - 7
    replacement = "B" if secret[position] != "B" else "C"
    return secret[:position] + replacement + secret[position + 1 :]


@pytest.mark.parametrize("kind", ["api_key", "oauth"])
def test_it_refuses_a_mistyped_credential_by_its_checksum(live_api, alice_key, alice_token, kind):
    secret = alice_key if kind == "api_key" else alice_token
    mistyped = _flip_last_body_char(secret)

    response = live_api.get("/v1/models", headers=bearer(mistyped))

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")
    assert "checksum" in response.json()["error"]["message"]


def test_it_refuses_a_mistyped_key_before_querying_the_database(client, alice_key, django_assert_num_queries):
    # Django's test client runs in this thread, so the queries are countable: none at all.
    with django_assert_num_queries(0):
        response = client.get("/v1/models", headers=bearer(_flip_last_body_char(alice_key)))

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize("generate", [api_key_generate, oauth_access_token_generate], ids=["key", "oauth"])
def test_it_refuses_a_well_formed_but_unknown_credential(live_api, alice_key, generate):
    response = live_api.get("/v1/models", headers=bearer(generate()))

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")


def test_it_refuses_a_revoked_key(live_api, alice_key):
    assert live_api.get("/v1/models", headers=bearer(alice_key)).status_code == 200
    api_key_revoke(api_key=ApiKey.objects.get())

    response = live_api.get("/v1/models", headers=bearer(alice_key))

    assert_compatible_error(response, status=401, type_="authentication_error", code="revoked_api_key")
    assert ApiKey.objects.get().revoked_at is not None


def test_it_refuses_an_expired_key(live_api, alice, alpha_group, alpha_model, key_for):
    secret = key_for(alice, alpha_group, expires_at=timezone.now() - timedelta(seconds=1))

    response = live_api.get("/v1/models", headers=bearer(secret))

    assert_compatible_error(response, status=401, type_="authentication_error", code="expired_api_key")


def test_it_refuses_a_revoked_oauth_token(live_api, alice_token):
    assert live_api.get("/v1/me", headers=bearer(alice_token)).status_code == 200
    assert oauth_token_revoke(access_token=AccessToken.objects.get()) is True

    response = live_api.get("/v1/me", headers=bearer(alice_token))

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")
    assert not AccessToken.objects.exists()


def test_it_refuses_an_expired_oauth_token(live_api, alice, token_for):
    secret = token_for(alice, ["profile:read"], expires_in_seconds=60)
    AccessToken.objects.update(expires=timezone.now() - timedelta(seconds=1))

    response = live_api.get("/v1/me", headers=bearer(secret))

    assert_compatible_error(response, status=401, type_="authentication_error", code="expired_api_key")


def test_it_refuses_a_key_of_a_deactivated_user(live_api, alice, alice_key):
    alice.user.is_active = False
    alice.user.save(update_fields=["is_active"])

    response = live_api.get("/v1/models", headers=bearer(alice_key))

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")


@pytest.mark.parametrize("param", ["key", "api_key"])
@pytest.mark.parametrize("with_header", [False, True], ids=["query_only", "query_and_header"])
def test_it_refuses_a_key_in_the_query_string(live_api, alice_key, param, with_header):
    headers = bearer(alice_key) if with_header else {}

    response = live_api.get(f"/v1/models?{param}={alice_key}", headers=headers)

    error = assert_compatible_error(
        response, status=400, type_="invalid_request_error", code="api_key_in_query_deprecated"
    )
    assert "query" in error["message"]
    assert "Authorization header" in error["message"]
    assert alice_key not in response.text
    # Refused before the key was looked at: it was not marked as used.
    assert ApiKey.objects.get().last_used_at is None


@pytest.mark.parametrize(
    "headers",
    [
        lambda a, b: {"Authorization": f"Bearer {a}", "x-api-key": b},
        lambda a, b: {"x-api-key": a, "x-goog-api-key": b},
        lambda a, b: {"Authorization": f"Bearer {a}", "x-goog-api-key": b},
    ],
    ids=["authorization_and_x_api_key", "x_api_key_and_x_goog_api_key", "authorization_and_x_goog"],
)
def test_it_refuses_two_different_credential_headers(live_api, alice_key, alice_token, headers):
    response = live_api.get("/v1/models", headers=headers(alice_key, alice_token))

    error = assert_compatible_error(
        response, status=400, type_="invalid_request_error", code="multiple_credentials"
    )
    assert alice_key not in error["message"] and alice_token not in error["message"]


def test_it_accepts_the_same_key_repeated_in_two_headers(live_api, alice_key):
    response = live_api.get(
        "/v1/models", headers={"Authorization": f"Bearer {alice_key}", "x-api-key": alice_key}
    )

    assert response.status_code == 200


def test_it_writes_last_used_at_at_most_once_a_minute(live_api, alice_key):
    assert live_api.get("/v1/models", headers=bearer(alice_key)).status_code == 200
    first = ApiKey.objects.get().last_used_at
    assert first is not None

    assert live_api.get("/v1/models", headers=bearer(alice_key)).status_code == 200
    assert ApiKey.objects.get().last_used_at == first

    # A minute later the next use records the new time (the live server runs in this process, so this
    # verification shares its cached credential, if any).
    later = first + timedelta(seconds=61)
    credential_verify(secret=alice_key, now=later)
    assert ApiKey.objects.get().last_used_at == later
