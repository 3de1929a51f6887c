"""Authorized applications: the OAuth applications holding tokens for the account, with revoke."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, RefreshToken, set_token_value

from keys.secrets import oauth_access_token_generate, oauth_refresh_token_generate
from keys.services import oauth_token_create


def _application(name: str) -> Application:
    return Application.objects.create(
        name=name,
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="https://app.example/callback",
    )


def _grant(account, application: Application, *, scope: str = "profile:read account:read"):
    """What the authorization-code flow leaves behind: an access token and its refresh token."""
    secret = oauth_access_token_generate()
    access = AccessToken(
        user=account.user, application=application, scope=scope, expires=timezone.now() + timedelta(hours=1)
    )
    set_token_value(access, secret)
    access.save()
    refresh = RefreshToken(user=account.user, application=application, access_token=access)
    set_token_value(refresh, oauth_refresh_token_generate())
    refresh.save()
    return access, refresh, secret


@pytest.fixture
def sketchbook():
    return _application("Sketchbook")


def test_it_lists_the_applications_holding_tokens_for_the_account_only(alice_client, alice, bob, sketchbook):
    _grant(alice, sketchbook)
    _grant(bob, _application("Bob's Mailer"))
    oauth_token_create(account=alice, scopes=["account:balance:read"])

    response = alice_client.get("/console/applications/")

    assert response.status_code == 200
    names = [item.name for item in response.context["applications"]]
    assert names == ["Sketchbook", "Issued by an operator"]
    html = response.content.decode()
    assert "<code>account:read</code> <code>profile:read</code>" in html
    assert "Bob&#x27;s Mailer" not in html


def test_an_application_whose_tokens_are_gone_is_not_listed(alice_client, alice, sketchbook):
    _, refresh, _ = _grant(alice, sketchbook)
    refresh.revoke()

    response = alice_client.get("/console/applications/")

    assert response.context["applications"] == []
    assert b"No application holds a token for your account." in response.content


def test_revoking_an_application_makes_its_tokens_fail_at_once(
    alice_client, alice, sketchbook, alpha_group, django_capture_on_commit_callbacks
):
    access, refresh, secret = _grant(alice, sketchbook)
    api = Client()
    assert api.get("/v1/me", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    confirm = alice_client.get(f"/console/applications/{sketchbook.pk}/revoke/")
    assert confirm.status_code == 200 and b"Revoke access for Sketchbook?" in confirm.content

    # The test's transaction never commits; run what the commit would (the credential cache's
    # invalidation) as it happens.
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(f"/console/applications/{sketchbook.pk}/revoke/", follow=True)

    assert response.redirect_chain == [("/console/applications/", 302)]
    assert b"Sketchbook can no longer act for your account." in response.content
    assert not AccessToken.objects.filter(pk=access.pk).exists()
    refresh.refresh_from_db()
    assert refresh.revoked is not None
    assert api.get("/v1/me", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401


def test_revoking_also_ends_a_refresh_token_whose_access_token_is_gone(alice_client, alice, sketchbook):
    access, refresh, _ = _grant(alice, sketchbook)
    AccessToken.objects.filter(pk=access.pk).delete()  # e.g. cleartokens removed the expired token

    response = alice_client.post(f"/console/applications/{sketchbook.pk}/revoke/")

    assert response.status_code == 302
    refresh.refresh_from_db()
    assert refresh.revoked is not None


def test_revoking_operator_issued_tokens(alice_client, alice):
    token, secret = oauth_token_create(account=alice, scopes=["profile:read"])

    response = alice_client.post("/console/applications/operator/revoke/")

    assert response.status_code == 302
    assert not AccessToken.objects.filter(pk=token.pk).exists()
    assert Client().get("/v1/me", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401


@pytest.mark.parametrize("method", ["get", "post"])
def test_another_accounts_application_is_not_found(alice_client, alice, bob, method):
    mailer = _application("Bob's Mailer")
    access, _, _ = _grant(bob, mailer)

    response = getattr(alice_client, method)(f"/console/applications/{mailer.pk}/revoke/")

    assert response.status_code == 404
    assert AccessToken.objects.filter(pk=access.pk).exists()


def test_operator_tokens_page_is_not_found_without_such_tokens(alice_client, bob):
    oauth_token_create(account=bob, scopes=["profile:read"])

    assert alice_client.post("/console/applications/operator/revoke/").status_code == 404
    assert AccessToken.objects.filter(user=bob.user).count() == 1
