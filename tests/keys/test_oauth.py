"""OAuth 2: the authorization-code + PKCE flow end to end, refresh rotation, and createtoken."""

from __future__ import annotations

import io
from datetime import timedelta
from urllib.parse import urlencode, urlsplit

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from oauth2_provider.models import AccessToken, Grant, RefreshToken

from keys.secrets import oauth_access_token_well_formed, oauth_token_checksum
from tests.keys.conftest import (
    REDIRECT_URI,
    assert_compatible_error,
    bearer,
    oauth_authorize,
    oauth_issue,
    oauth_token_request,
    pkce_pair,
)

pytestmark = pytest.mark.django_db


def test_the_authorization_code_flow_with_pkce_yields_an_sk_oauth_token_that_calls_me(
    client, alice, oauth_app
):
    tokens = oauth_issue(client, alice, oauth_app, scope="profile:read account:read")

    assert oauth_access_token_well_formed(tokens["access_token"])
    assert tokens["refresh_token"].startswith("rt_oauth_")
    assert tokens["token_type"] == "Bearer"
    assert set(tokens["scope"].split()) == {"profile:read", "account:read"}

    me = client.get("/v1/me", headers=bearer(tokens["access_token"]))
    assert me.status_code == 200
    body = me.json()
    assert body["user"]["username"] == "alice"
    assert body["current_group"]["name"] == "Alpha-Image"
    assert "balance" not in body  # account:balance:read was not granted

    stored = AccessToken.objects.get()
    assert stored.user == alice.user
    assert stored.application == oauth_app[0]
    assert stored.token == ""
    assert stored.token_checksum == oauth_token_checksum(tokens["access_token"])
    assert not Grant.objects.exists()  # the authorization code is spent


def test_the_authorize_page_sends_an_anonymous_user_to_sign_in_first(client, alice, oauth_app):
    application, _ = oauth_app
    _, challenge = pkce_pair()
    query = urlencode(
        {
            "response_type": "code",
            "client_id": application.client_id,
            "redirect_uri": REDIRECT_URI,
            "scope": "profile:read",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )

    response = client.get(f"/oauth/authorize/?{query}")

    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert location.path == "/accounts/login/"
    assert location.query.startswith("next=/oauth/authorize/")  # back to the consent step after signing in
    sign_in = client.get(response["Location"])
    assert sign_in.status_code == 200
    assert b"Sign in" in sign_in.content


def test_the_consent_page_names_the_application_and_the_scopes(client, alice, oauth_app):
    application, _ = oauth_app
    client.force_login(alice.user)
    _, challenge = pkce_pair()
    query = urlencode(
        {
            "response_type": "code",
            "client_id": application.client_id,
            "redirect_uri": REDIRECT_URI,
            "scope": "account:balance:read",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )

    page = client.get(f"/oauth/authorize/?{query}").content.decode()

    assert "Sketchbook" in page
    assert "Read your balance" in page
    assert "Read your user profile" not in page


def test_it_refuses_to_exchange_a_code_with_the_wrong_pkce_verifier(client, alice, oauth_app):
    application, client_secret = oauth_app
    client.force_login(alice.user)
    _, challenge = pkce_pair()
    redirect = oauth_authorize(client, application, scope="profile:read", challenge=challenge)
    wrong_verifier, _ = pkce_pair()

    response = oauth_token_request(
        client,
        grant_type="authorization_code",
        code=redirect["code"],
        redirect_uri=REDIRECT_URI,
        client_id=application.client_id,
        client_secret=client_secret,
        code_verifier=wrong_verifier,
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    assert not AccessToken.objects.exists()


def test_it_refuses_an_authorization_request_without_pkce(client, alice, oauth_app):
    application, _ = oauth_app
    client.force_login(alice.user)
    query = urlencode(
        {
            "response_type": "code",
            "client_id": application.client_id,
            "redirect_uri": REDIRECT_URI,
            "scope": "profile:read",
        }
    )

    response = client.get(f"/oauth/authorize/?{query}")

    assert response.status_code == 302
    assert "error=invalid_request" in response["Location"]
    assert "code=" not in response["Location"]


def test_a_refresh_rotates_both_tokens_and_retires_the_old_access_token(client, alice, oauth_app):
    application, client_secret = oauth_app
    first = oauth_issue(client, alice, oauth_app, scope="profile:read")

    response = oauth_token_request(
        client,
        grant_type="refresh_token",
        refresh_token=first["refresh_token"],
        client_id=application.client_id,
        client_secret=client_secret,
    )

    assert response.status_code == 200, response.content
    second = response.json()
    assert oauth_access_token_well_formed(second["access_token"])
    assert second["refresh_token"] != first["refresh_token"]
    assert client.get("/v1/me", headers=bearer(second["access_token"])).status_code == 200
    old = client.get("/v1/me", headers=bearer(first["access_token"]))
    assert_compatible_error(old, status=401, type_="authentication_error", code="invalid_api_key")
    assert RefreshToken.objects.filter(revoked__isnull=False).count() == 1


def test_reusing_a_spent_refresh_token_revokes_the_whole_family(client, alice, oauth_app):
    application, client_secret = oauth_app
    first = oauth_issue(client, alice, oauth_app, scope="profile:read")
    refresh = {
        "grant_type": "refresh_token",
        "client_id": application.client_id,
        "client_secret": client_secret,
    }
    second = oauth_token_request(client, **refresh, refresh_token=first["refresh_token"]).json()

    replay = oauth_token_request(client, **refresh, refresh_token=first["refresh_token"])

    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert client.get("/v1/me", headers=bearer(second["access_token"])).status_code == 401
    assert not RefreshToken.objects.filter(revoked__isnull=True).exists()


def test_the_revocation_endpoint_revokes_a_token_at_once(client, alice, oauth_app):
    application, client_secret = oauth_app
    tokens = oauth_issue(client, alice, oauth_app, scope="profile:read")

    response = client.post(
        "/oauth/revoke_token/",
        data=urlencode(
            {
                "token": tokens["access_token"],
                "client_id": application.client_id,
                "client_secret": client_secret,
            }
        ),
        content_type="application/x-www-form-urlencoded",
    )

    assert response.status_code == 200
    assert client.get("/v1/me", headers=bearer(tokens["access_token"])).status_code == 401
    assert not AccessToken.objects.exists()


# --- createtoken -----------------------------------------------------------------------------------------


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_createtoken_prints_a_working_token_alone_on_its_last_line(client, alice):
    out, err = run(
        "createtoken", "alice", "--scopes", "profile:read account:read", "--expires-in-seconds", "600"
    )

    token = out.strip().splitlines()[-1]
    assert oauth_access_token_well_formed(token)
    assert "shown once" in err
    stored = AccessToken.objects.get()
    assert stored.token == ""
    assert stored.token_checksum == oauth_token_checksum(token)
    assert stored.scope == "account:read profile:read"
    assert stored.application is None
    assert timedelta(seconds=590) < stored.expires - timezone.now() <= timedelta(seconds=600)
    me = client.get("/v1/me", headers=bearer(token))
    assert me.status_code == 200
    assert set(me.json()) == {"object", "credential", "user", "account", "current_group", "allowed_groups"}


def test_createtoken_refuses_unknown_users_scopes_and_lifetimes(alice):
    with pytest.raises(CommandError, match="no account for user 'nobody'"):
        run("createtoken", "nobody", "--scopes", "profile:read")
    with pytest.raises(CommandError, match=r"unknown scope\(s\) images:write"):
        run("createtoken", "alice", "--scopes", "profile:read images:write")
    with pytest.raises(CommandError, match="at least one scope"):
        run("createtoken", "alice", "--scopes", " ")
    with pytest.raises(CommandError, match="--expires-in-seconds: must be from 1 to"):
        run("createtoken", "alice", "--scopes", "profile:read", "--expires-in-seconds", "0")
    assert not AccessToken.objects.exists()
