"""Who may see the console: signed-in users with an account, each only their own; sessions end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import User

CONSOLE_PAGES = [
    ("console:overview", {}),
    ("console:keys", {}),
    ("console:key-revoke", {"api_key_id": 1}),
    ("console:playground", {}),
    ("console:applications", {}),
    ("console:application-revoke", {"application_id": 1}),
    ("console:operator-tokens-revoke", {}),
    ("console:responses", {}),
    ("console:responses-delete-all", {}),
    ("console:response-delete", {"response_id": "resp_1"}),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "kwargs"), CONSOLE_PAGES)
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_sends_anonymous_visitors_to_sign_in(client, name, kwargs, method):
    url = reverse(name, kwargs=kwargs)

    response = getattr(client, method)(url)

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


@pytest.mark.django_db
def test_it_redirects_the_root_to_the_console(client):
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/console/"


def test_it_signs_in_with_username_and_password_and_lands_on_the_overview(client, alice):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b'<label for="id_username">Username</label>' in page.content

    response = client.post(reverse("login"), {"username": "alice", "password": "alice-password-1"})

    assert response.status_code == 302
    assert response["Location"] == "/console/"
    assert client.get("/console/").context["account"] == alice


def test_it_refuses_a_wrong_password(client, alice):
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})

    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content
    assert "_auth_user_id" not in client.session


def test_it_signs_out_with_a_post_and_ends_the_session(alice_client):
    assert alice_client.get(reverse("logout")).status_code == 405  # never by a link a page can embed

    response = alice_client.post(reverse("logout"))

    assert response.status_code == 302
    assert response["Location"] == reverse("login")
    assert alice_client.get("/console/").status_code == 302


def test_it_ends_a_session_once_it_has_expired(alice_client):
    assert alice_client.get("/console/").status_code == 200
    Session.objects.filter(session_key=alice_client.session.session_key).update(
        expire_date=timezone.now() - timedelta(seconds=1)
    )

    response = alice_client.get("/console/")

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_its_session_cookie_lives_as_long_as_configured(client, alice, settings):
    response = client.post(reverse("login"), {"username": "alice", "password": "alice-password-1"})

    cookie = response.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["max-age"] == settings.SESSION_COOKIE_AGE
    assert cookie["httponly"]


@pytest.mark.django_db
def test_it_tells_a_user_without_an_account_that_there_is_nothing_to_show(client):
    user = User.objects.create_user(username="loner", password="loner-password-1")
    client.force_login(user)

    response = client.get("/console/keys/")

    assert response.status_code == 403
    assert b"has no gateway account" in response.content


@pytest.mark.parametrize(
    "url", ["/console/", "/console/keys/", "/console/playground/", "/console/applications/"]
)
def test_its_pages_are_never_cached(alice_client, alpha_model, url):
    response = alice_client.get(url)

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert "private" in response["Cache-Control"]


@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("/console/keys/", {"label": "x", "group": "1"}),
        ("/console/playground/", {"prompt": "a cat", "n": "1"}),
        ("/console/applications/operator/revoke/", {}),
        (reverse("logout"), {}),
    ],
)
def test_every_form_needs_the_csrf_token(alice, alpha_model, url, data):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice.user)

    response = strict.post(url, data)

    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert alice.api_keys.count() == 0
    assert alice.usage_records.count() == 0
