"""Revocation seen at once by another gateway process: a second gunicorn serving the same database.

Needs a database both processes share, so it runs on PostgreSQL only (the SQLite test database lives
in this process's memory). With REDIS_URL set (CI) the second process caches credentials, so these
tests prove that the invalidation reaches another process at its next request.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from oauth2_provider.models import AccessToken, set_token_value

from accounts.models import User
from accounts.services import account_set_groups
from keys.models import ApiKey
from keys.secrets import oauth_access_token_generate
from keys.services import api_key_revoke, oauth_application_revoke_for_user, oauth_token_revoke
from tests.gunicorn_server import gunicorn_serving
from tests.keys.conftest import LiveApi, assert_compatible_error, bearer

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not ON_POSTGRES,
        reason="needs a database shared by two processes: set DATABASE_URL to PostgreSQL",
    ),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def second_gateway(transactional_db, tmp_path):
    """A separate gunicorn process on the test database, ready to serve."""
    with gunicorn_serving(log_path=tmp_path / "gunicorn.log") as base_url:
        api = LiveApi(base_url)
        yield api
        api.session.close()


def test_it_refuses_a_key_revoked_in_another_process_at_once(second_gateway, alice_key):
    # The second process has served this key (so anything it might cache is warm).
    assert second_gateway.get("/v1/models", headers=bearer(alice_key)).status_code == 200

    api_key_revoke(api_key=ApiKey.objects.get())
    response = second_gateway.get("/v1/models", headers=bearer(alice_key))

    assert_compatible_error(response, status=401, type_="authentication_error", code="revoked_api_key")
    assert ApiKey.objects.get().revoked_at is not None


def test_it_refuses_an_oauth_token_revoked_in_another_process_at_once(second_gateway, alice_token):
    assert second_gateway.get("/v1/me", headers=bearer(alice_token)).status_code == 200

    oauth_token_revoke(access_token=AccessToken.objects.get())
    response = second_gateway.get("/v1/me", headers=bearer(alice_token))

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")
    assert not AccessToken.objects.exists()


def test_it_refuses_a_key_of_a_user_deactivated_in_another_process_at_once(second_gateway, alice, alice_key):
    assert second_gateway.get("/v1/models", headers=bearer(alice_key)).status_code == 200
    assert second_gateway.get("/v1/models", headers=bearer(alice_key)).status_code == 200

    user = User.objects.get(pk=alice.user_id)
    user.is_active = False
    user.save()  # as the admin's user page does
    response = second_gateway.get("/v1/models", headers=bearer(alice_key))

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")


def test_it_refuses_the_tokens_of_an_application_revoked_in_another_process_at_once(
    second_gateway, alice, alpha_model, oauth_app
):
    application, _ = oauth_app
    secret = oauth_access_token_generate()
    access = AccessToken(
        user=alice.user,
        application=application,
        scope="profile:read",
        expires=timezone.now() + timedelta(hours=1),
    )
    set_token_value(access, secret)
    access.save()
    assert second_gateway.get("/v1/me", headers=bearer(secret)).status_code == 200

    # The console's "Revoke access" for this application.
    assert oauth_application_revoke_for_user(user_id=alice.user_id, application_id=application.pk) == 1
    response = second_gateway.get("/v1/me", headers=bearer(secret))

    assert_compatible_error(response, status=401, type_="authentication_error", code="invalid_api_key")


def test_it_serves_an_oauth_token_from_a_current_group_changed_in_another_process_at_once(
    second_gateway, alice, alice_token, alpha_group, gamma_group, gamma_model
):
    account_set_groups(account=alice, allowed_groups=[alpha_group, gamma_group], current_group=alpha_group)
    listed = second_gateway.get("/v1/models", headers=bearer(alice_token))
    assert [item["id"] for item in listed.json()["data"]] == ["alpha-image-2"]

    account_set_groups(account=alice, allowed_groups=[alpha_group, gamma_group], current_group=gamma_group)
    listed = second_gateway.get("/v1/models", headers=bearer(alice_token))

    assert listed.status_code == 200
    assert [item["id"] for item in listed.json()["data"]] == ["gamma-image-1"]
