"""The API Keys page: list, create (secret shown once), revoke with confirmation; own keys only."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests
from django.db import connection
from django.test import Client
from django.utils import timezone

from groups.models import Group
from keys.models import ApiKey
from keys.secrets import api_key_hash

SECRET = re.compile(rb"sk-[0-9A-Za-z]{49}")


def test_it_lists_the_accounts_own_keys_only(alice_client, alice_key, bob_key):
    response = alice_client.get("/console/keys/")

    assert response.status_code == 200
    assert alice_key[0].prefix.encode() in response.content
    assert b"alice laptop" in response.content
    assert bob_key[0].prefix.encode() not in response.content
    assert b"bob server" not in response.content
    assert [key.pk for key in response.context["keys"]] == [alice_key[0].pk]


def test_it_never_renders_a_secret_in_the_list(alice_client, alice_key):
    response = alice_client.get("/console/keys/")

    assert alice_key[1].encode() not in response.content
    assert SECRET.search(response.content) is None


def test_it_creates_a_labelled_key_and_shows_its_secret_once(alice_client, alice, alpha_group):
    posted = alice_client.post(
        "/console/keys/", {"label": "ci runner", "group": alpha_group.pk, "expires_in_days": ""}
    )
    assert posted.status_code == 302 and posted["Location"] == "/console/keys/"
    assert SECRET.search(posted.content) is None

    response = alice_client.get("/console/keys/")

    assert response.status_code == 200
    secrets_shown = SECRET.findall(response.content)
    assert len(set(secrets_shown)) == 1
    secret = secrets_shown[0].decode()
    assert b"it will not be shown again" in response.content
    api_key = ApiKey.objects.get(account=alice)
    assert api_key.label == "ci runner"
    assert api_key.group == alpha_group
    assert api_key.expires_at is None
    assert api_key.key_hash == api_key_hash(secret)
    assert secret.startswith(api_key.prefix)

    again = alice_client.get("/console/keys/")
    assert secret.encode() not in again.content
    assert api_key.prefix.encode() in again.content


def test_a_created_key_works_on_the_api_at_once(alice_client, alpha_group, alpha_model):
    response = alice_client.post("/console/keys/", {"label": "", "group": alpha_group.pk}, follow=True)
    secret = SECRET.search(response.content).group().decode()

    models = Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert models.status_code == 200
    assert [item["id"] for item in models.json()["data"]] == ["alpha-image-2"]


def test_a_reload_after_creating_a_key_creates_none_and_shows_no_secret(alice_client, alice, alpha_group):
    alice_client.post("/console/keys/", {"label": "once", "group": alpha_group.pk})
    first = alice_client.get("/console/keys/")
    assert len(SECRET.findall(first.content)) >= 1

    reloaded = alice_client.get("/console/keys/")

    assert reloaded.status_code == 200
    assert SECRET.search(reloaded.content) is None
    assert b"it will not be shown again" not in reloaded.content
    assert ApiKey.objects.filter(account=alice).count() == 1


def test_the_same_key_form_sent_twice_creates_one_key(alice_client, alice, alpha_group):
    page = alice_client.get("/console/keys/")
    token = page.context["form"]["form_token"].value()
    fields = {"label": "double click", "group": alpha_group.pk, "form_token": token}

    first = alice_client.post("/console/keys/", fields)
    second = alice_client.post("/console/keys/", fields)

    assert first.status_code == second.status_code == 302
    assert ApiKey.objects.filter(account=alice).count() == 1
    shown = alice_client.get("/console/keys/")
    assert len(set(SECRET.findall(shown.content))) == 1  # the first POST's secret, still shown once


def test_a_secret_left_in_the_session_is_not_shown_after_a_while(alice_client, alpha_group, monkeypatch):
    from console.views import keys as key_views

    alice_client.post("/console/keys/", {"group": alpha_group.pk})
    monkeypatch.setattr(key_views, "NEW_KEY_SHOWN_FOR_SECONDS", -1)

    assert SECRET.search(alice_client.get("/console/keys/").content) is None


def test_it_sets_the_chosen_expiry(alice_client, alice, alpha_group):
    before = timezone.now()

    response = alice_client.post("/console/keys/", {"group": alpha_group.pk, "expires_in_days": "7"})

    assert response.status_code == 302
    expires_at = ApiKey.objects.get(account=alice).expires_at
    assert before + timedelta(days=7) <= expires_at <= timezone.now() + timedelta(days=7)


def test_it_refuses_a_group_the_account_may_not_use(alice_client, alice, beta_group):
    response = alice_client.post("/console/keys/", {"label": "sneaky", "group": beta_group.pk})

    assert response.status_code == 400
    assert b"Select a valid choice" in response.content
    assert not ApiKey.objects.filter(account=alice).exists()


def test_it_offers_only_the_accounts_active_allowed_groups(alice_client, alice, alpha_group, beta_group):
    disabled = Group.objects.create(id=7, name="Old-Group", status=Group.Status.DISABLED)
    alice.allowed_groups.add(disabled)

    response = alice_client.get("/console/keys/")

    offered = list(response.context["form"].fields["group"].queryset)
    assert offered == [alpha_group]
    assert b"Beta-API" not in response.content


def test_it_asks_for_confirmation_before_revoking(alice_client, alice_key):
    api_key, _ = alice_key

    response = alice_client.get(f"/console/keys/{api_key.pk}/revoke/")

    assert response.status_code == 200
    assert b"Revoke the key" in response.content
    assert b'method="post"' in response.content
    api_key.refresh_from_db()
    assert api_key.revoked_at is None


def test_revoking_a_key_makes_the_api_refuse_it_at_once(
    alice_client, alice_key, alpha_model, django_capture_on_commit_callbacks
):
    api_key, secret = alice_key
    api = Client()
    assert api.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200

    # The test's transaction never commits; run what the commit would (the credential cache's
    # invalidation) as it happens.
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(f"/console/keys/{api_key.pk}/revoke/", follow=True)

    assert response.redirect_chain == [("/console/keys/", 302)]
    assert b"was revoked" in response.content
    api_key.refresh_from_db()
    assert api_key.revoked_at is not None
    refused = api.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"


def test_revoking_twice_says_it_already_was(alice_client, alice_key):
    api_key, _ = alice_key
    alice_client.post(f"/console/keys/{api_key.pk}/revoke/")
    first = ApiKey.objects.get(pk=api_key.pk).revoked_at

    response = alice_client.post(f"/console/keys/{api_key.pk}/revoke/", follow=True)

    assert b"was already revoked" in response.content
    assert ApiKey.objects.get(pk=api_key.pk).revoked_at == first


@pytest.mark.parametrize("method", ["get", "post"])
def test_another_accounts_key_is_not_found(alice_client, bob_key, method):
    api_key, _ = bob_key

    response = getattr(alice_client, method)(f"/console/keys/{api_key.pk}/revoke/")

    assert response.status_code == 404
    api_key.refresh_from_db()
    assert api_key.revoked_at is None


def test_a_key_id_that_does_not_exist_is_not_found(alice_client):
    assert alice_client.get("/console/keys/999999/revoke/").status_code == 404


@pytest.mark.postgres
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="needs PostgreSQL: the SQLite test database (in memory, shared cache) locks whole tables",
)
@pytest.mark.django_db(transaction=True)
def test_simultaneous_posts_of_one_key_form_create_one_key(live_server, alice, alpha_group):
    """Eight POSTs of one form at the same moment, over HTTP to the threaded live server: the form's
    token is claimed by one of them atomically (a unique row), so exactly one key is made."""
    console = requests.Session()
    console.get(f"{live_server.url}/accounts/login/", timeout=10)
    signed_in = console.post(
        f"{live_server.url}/accounts/login/",
        data={
            "username": "alice",
            "password": "alice-password-1",
            "csrfmiddlewaretoken": console.cookies["csrftoken"],
        },
        allow_redirects=False,
        timeout=10,
    )
    assert signed_in.status_code == 302
    page = console.get(f"{live_server.url}/console/keys/", timeout=10).text
    token = re.search(r'name="form_token" value="([^"]+)"', page).group(1)
    fields = {
        "label": "eager",
        "group": alpha_group.pk,
        "form_token": token,
        "csrfmiddlewaretoken": console.cookies["csrftoken"],
    }
    start = threading.Barrier(8)

    def send(_: int) -> int:
        start.wait()
        return console.post(
            f"{live_server.url}/console/keys/", data=fields, allow_redirects=False, timeout=30
        ).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(send, range(8)))

    assert statuses == [302] * 8
    assert list(ApiKey.objects.filter(account=alice).values_list("label", flat=True)) == ["eager"]
    shown = console.get(f"{live_server.url}/console/keys/", timeout=10)
    assert len(set(SECRET.findall(shown.content))) == 1


def test_a_form_token_the_page_did_not_make_is_refused(alice_client, alice, alpha_group):
    fields = {"label": "odd", "group": alpha_group.pk, "form_token": "a b\x07"}

    response = alice_client.post("/console/keys/", fields)

    assert response.status_code == 400
    assert not ApiKey.objects.filter(account=alice).exists()
