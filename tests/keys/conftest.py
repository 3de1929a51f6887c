"""Fixtures for credentials, groups and the error model: keys and tokens made through the services,
more groups in every state, and a small HTTP client for the live server."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Callable, Iterable
from datetime import datetime
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
import requests
from oauth2_provider.models import Application

from accounts.models import Account
from accounts.services import account_create, account_set_groups
from groups.models import Group
from groups.services import group_upsert
from images.models import ImageModel
from keys.services import api_key_create, oauth_token_create
from tests.factories import image_model_make


def group_make(
    *,
    group_id: int,
    name: str,
    status: str = "active",
    image_enabled: bool = True,
    billing: str = "balance",
    allow_group_override: bool = True,
) -> Group:
    group, _ = group_upsert(
        group_id=group_id,
        name=name,
        status=status,
        image_enabled=image_enabled,
        billing=billing,
        allow_group_override=allow_group_override,
        rpm=0,
        concurrency=0,
    )
    return group


def model_make(*, model_id: str, group: Group, upstream, enabled: bool = True) -> ImageModel:
    return image_model_make(model_id=model_id, group=group, upstreams=[upstream], enabled=enabled)


@pytest.fixture
def gamma_group(db):
    """A third balance-billed, override-friendly image group (id 3) with its own model."""
    return group_make(group_id=3, name="Gamma-Image")


@pytest.fixture
def gamma_model(gamma_group, demo_upstream):
    return model_make(model_id="gamma-image-1", group=gamma_group, upstream=demo_upstream)


@pytest.fixture
def key_for() -> Callable[..., str]:
    """key_for(account, group, expires_at=None) -> a fresh API key secret."""

    def make(account: Account, group: Group, *, expires_at: datetime | None = None, label: str = "") -> str:
        _, secret = api_key_create(account=account, group=group, label=label, expires_at=expires_at)
        return secret

    return make


@pytest.fixture
def token_for() -> Callable[..., str]:
    """token_for(account, scopes, expires_in_seconds=3600) -> a fresh OAuth access token secret."""

    def make(account: Account, scopes: Iterable[str] = (), *, expires_in_seconds: int = 3600) -> str:
        _, secret = oauth_token_create(account=account, scopes=scopes, expires_in_seconds=expires_in_seconds)
        return secret

    return make


@pytest.fixture
def alice_key(alice, alpha_group, alpha_model, key_for) -> str:
    return key_for(alice, alpha_group)


@pytest.fixture
def alice_token(alice, alpha_model, token_for) -> str:
    return token_for(alice, ["profile:read", "account:read", "account:balance:read"])


@pytest.fixture
def carol(alpha_group, beta_group, gamma_group):
    """An account allowed in Alpha (current), Beta (subscription) and Gamma."""
    account = account_create(username="carol", email="carol@example.com", password="carol-password-1")
    account_set_groups(
        account=account, allowed_groups=[alpha_group, beta_group, gamma_group], current_group=alpha_group
    )
    return account


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


class LiveApi:
    """requests against the live server, with no retries or redirects hiding anything."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.session.get(self.base_url + path, timeout=10, allow_redirects=False, **kwargs)

    def post(self, path: str, **kwargs) -> requests.Response:
        return self.session.post(self.base_url + path, timeout=10, allow_redirects=False, **kwargs)


@pytest.fixture
def live_api(live_server, transactional_db) -> LiveApi:
    api = LiveApi(live_server.url)
    yield api
    api.session.close()


def assert_compatible_error(response, *, status: int, type_: str, code: str | None) -> dict:
    """The response is a compatible-shape error with this status/type/code, ending with its request id."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == type_
    assert error["code"] == code
    request_id = response.headers["X-Request-Id"]
    assert error["message"].endswith(f"(request id: {request_id})")
    return error


# --- the OAuth authorization-code + PKCE flow, as a browser and a client app drive it -----------------

REDIRECT_URI = "http://127.0.0.1:8765/callback"


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


@pytest.fixture
def oauth_app(db):
    """A confidential application registered by staff, and its client secret (hashed at rest)."""
    client_secret = "app-secret-" + secrets.token_urlsafe(32)
    application = Application.objects.create(
        name="Sketchbook",
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=REDIRECT_URI,
        client_secret=client_secret,
    )
    return application, client_secret


def oauth_authorize(client, application, *, scope: str, challenge: str, state: str = "st-123"):
    """Sign-in already done: show the consent page, allow it, and return the redirect's query."""
    query = urlencode(
        {
            "response_type": "code",
            "client_id": application.client_id,
            "redirect_uri": REDIRECT_URI,
            "scope": scope,
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )
    consent = client.get(f"/oauth/authorize/?{query}")
    assert consent.status_code == 200, consent.content[:500]
    form = consent.context["form"]
    data = {field.name: field.value() or "" for field in form if field.is_hidden}
    allowed = client.post(f"/oauth/authorize/?{query}", data={**data, "allow": "Authorize"})
    assert allowed.status_code == 302, allowed.content[:500]
    location = urlsplit(allowed["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT_URI
    return dict(parse_qsl(location.query))


def oauth_token_request(client, **fields):
    return client.post(
        "/oauth/token/", data=urlencode(fields), content_type="application/x-www-form-urlencoded"
    )


def oauth_issue(client, account, oauth_app, *, scope: str) -> dict:
    """The whole flow for `account` (signed in through the login page): the token endpoint's JSON."""
    application, client_secret = oauth_app
    username = account.user.get_username()
    signed_in = client.post("/accounts/login/", {"username": username, "password": f"{username}-password-1"})
    assert signed_in.status_code == 302, signed_in.content[:500]
    verifier, challenge = pkce_pair()
    redirect = oauth_authorize(client, application, scope=scope, challenge=challenge)
    response = oauth_token_request(
        client,
        grant_type="authorization_code",
        code=redirect["code"],
        redirect_uri=REDIRECT_URI,
        client_id=application.client_id,
        client_secret=client_secret,
        code_verifier=verifier,
    )
    assert response.status_code == 200, response.content
    return response.json()
