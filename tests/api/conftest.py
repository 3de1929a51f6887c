"""Fixtures of the `/v1/admin` API tests: a client of the live server, and a staff key."""

from __future__ import annotations

import pytest
import requests

from keys.services import api_key_create


@pytest.fixture
def api(live_server, transactional_db):
    """`call(method, path, secret, **kwargs)`: a request to the live server, with the secret as the
    bearer token (none when None)."""
    session = requests.Session()

    def call(method: str, path: str, secret: str | None, **kwargs) -> requests.Response:
        headers = kwargs.pop("headers", {})
        if secret is not None:
            headers["Authorization"] = f"Bearer {secret}"
        return session.request(method, live_server.url + path, headers=headers, timeout=10, **kwargs)

    yield call
    session.close()


@pytest.fixture
def staff_key(staff, alpha_group) -> str:
    """A staff account's key, in a group its account may use."""
    staff.account.allowed_groups.add(alpha_group)
    return api_key_create(account=staff.account, group=alpha_group)[1]
