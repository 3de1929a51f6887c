"""A dump of the database holds no usable credential: not the API keys, not the OAuth access or
refresh tokens, not the applications' client secrets, and no stored value works as a credential."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection
from oauth2_provider.models import AccessToken, Application, RefreshToken

from keys.models import ApiKey
from tests.keys.conftest import bearer, oauth_issue

pytestmark = pytest.mark.django_db


def every_cell() -> list[str]:
    cells = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - table names from introspection
            cells.extend(str(value) for row in cursor.fetchall() for value in row if value is not None)
    return cells


def test_a_database_dump_contains_no_usable_secret(
    client, alice, alpha_group, alpha_model, oauth_app, key_for
):
    api_key = key_for(alice, alpha_group)
    out = io.StringIO()
    call_command("createtoken", "alice", "--scopes", "profile:read", stdout=out, stderr=io.StringIO())
    operator_token = out.getvalue().strip().splitlines()[-1]
    flow = oauth_issue(client, alice, oauth_app, scope="profile:read account:read")
    _, client_secret = oauth_app
    secrets = {
        "api key": api_key,
        "operator token": operator_token,
        "access token": flow["access_token"],
        "refresh token": flow["refresh_token"],
        "client secret": client_secret,
    }
    # Every credential works before the dump is examined.
    for name in ("api key", "operator token", "access token"):
        assert client.get("/v1/me", headers=bearer(secrets[name])).status_code == 200, name

    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)
    cells = every_cell()

    for name, secret in secrets.items():
        assert secret not in dump.getvalue(), name
        assert all(secret not in cell for cell in cells), name
    assert ApiKey.objects.exists() and AccessToken.objects.count() == 2 and RefreshToken.objects.exists()
    assert Application.objects.get().client_secret.startswith(("pbkdf2_", "argon2", "bcrypt", "md5$"))

    # Nothing stored in the credential tables authenticates, whichever header it is sent in.
    stored = set()
    for model in (ApiKey, AccessToken, RefreshToken):
        for row in model.objects.values():
            stored.update(value for value in row.values() if isinstance(value, str) and value)
    assert stored
    for value in stored:
        response = client.get("/v1/models", headers={"x-api-key": value})
        assert response.status_code == 401, value
