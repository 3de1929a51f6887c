"""DRF authentication for the /v1 API: manual API keys and OAuth access tokens, from headers only.

`CredentialAuthentication.authenticate` returns `(user, Credential)`, returns None when no credential
header is present (the view's permission then answers 401 `missing_api_key`), and raises an ApiError
for everything else:

- `?key=` / `?api_key=` in the query string: 400 `api_key_in_query_deprecated` (with or without a header);
- two credential headers with different values: 400 `multiple_credentials`;
- malformed, bad checksum, unknown: 401 `invalid_api_key`; revoked: 401 `revoked_api_key`;
  expired: 401 `expired_api_key`.

Known credentials are read from a per-process cache that every relevant write invalidates on every
process (keys/selectors.py); the Credential holds the cached snapshots of the account and group.

Nothing here logs or echoes a credential.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from accounts.models import User
from core.errors import (
    API_KEY_IN_QUERY_DEPRECATED,
    EXPIRED_API_KEY,
    INVALID_API_KEY,
    MULTIPLE_CREDENTIALS,
    REVOKED_API_KEY,
    AuthenticationFailed,
    InvalidRequest,
)
from keys.credentials import Credential
from keys.secrets import (
    KEY_PREFIX,
    OAUTH_ACCESS_TOKEN_PREFIX,
    api_key_display_prefix,
    api_key_well_formed,
    oauth_access_token_well_formed,
)
from keys.selectors import api_key_snapshot_get, oauth_access_token_snapshot_get
from keys.services import api_key_mark_used

# The headers a credential may come in (spec, Authentication rules 2 and 4), as WSGI META names.
CREDENTIAL_HEADERS = {
    "HTTP_AUTHORIZATION": "Authorization",
    "HTTP_X_API_KEY": "x-api-key",
    "HTTP_X_GOOG_API_KEY": "x-goog-api-key",
}
QUERY_CREDENTIAL_PARAMS = ("key", "api_key")
WWW_AUTHENTICATE = 'Bearer realm="api"'


def _invalid(message: str) -> AuthenticationFailed:
    return AuthenticationFailed(message, code=INVALID_API_KEY)


def credential_from_request(*, request: Request) -> str | None:
    """The credential the request carries in its headers, or None when it carries none.

    Raises for a credential in the query string, for two headers that disagree, and for an
    Authorization header that is not `Bearer <credential>`.
    """
    query = request.query_params
    if any(name in query for name in QUERY_CREDENTIAL_PARAMS):
        raise InvalidRequest(
            "API keys must not be passed in the query string (?key= or ?api_key=): the query string "
            "ends up in logs and browser history. Send the key in the Authorization header instead: "
            "'Authorization: Bearer <API_KEY>'.",
            code=API_KEY_IN_QUERY_DEPRECATED,
        )
    found: dict[str, str] = {}
    for meta_name, header in CREDENTIAL_HEADERS.items():
        value = request.META.get(meta_name, "").strip()
        if not value:
            continue
        if header == "Authorization":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer":
                raise _invalid("The Authorization header must have the form 'Bearer <API_KEY>'.")
            value = token.strip()
            if not value:
                continue
        found[header] = value
    if len(set(found.values())) > 1:
        raise InvalidRequest(
            f"The request carries different credentials in {', '.join(sorted(found))}. "
            "Send exactly one, preferably as 'Authorization: Bearer <API_KEY>'.",
            code=MULTIPLE_CREDENTIALS,
        )
    return next(iter(found.values()), None)


def credential_verify(*, secret: str, now: datetime | None = None) -> Credential:
    """The Credential for a secret from a header; raises AuthenticationFailed (401) when it is not usable.

    The shape and checksum are checked before any database access.
    """
    moment = now or timezone.now()
    if secret.startswith(OAUTH_ACCESS_TOKEN_PREFIX):
        return _oauth_token_verify(token=secret, now=moment)
    if secret.startswith(KEY_PREFIX):
        return _api_key_verify(secret=secret, now=moment)
    raise _invalid("The API key is malformed: keys start with 'sk-', OAuth access tokens with 'sk_oauth_'.")


def _api_key_verify(*, secret: str, now: datetime) -> Credential:
    if not api_key_well_formed(secret):
        raise _invalid("The API key is malformed or mistyped (its checksum does not match).")
    # Cached per process while the configuration generation is unchanged (keys/selectors.py); the
    # expiry is compared with the clock here, on every request.
    api_key = api_key_snapshot_get(secret=secret)
    if api_key is None:
        raise _invalid("The API key is not valid.")
    if api_key.revoked_at is not None:
        raise AuthenticationFailed("The API key has been revoked.", code=REVOKED_API_KEY)
    if api_key.expires_at is not None and api_key.expires_at <= now:
        raise AuthenticationFailed("The API key has expired.", code=EXPIRED_API_KEY)
    _require_active_user(active=api_key.account.user_active)
    api_key_mark_used(api_key_id=api_key.id, last_used=api_key.last_used, now=now)
    return Credential(
        kind="api_key",
        id=api_key.id,
        account=api_key.account,
        bound_group=api_key.group,
        scopes=frozenset(),
        label=api_key.label,
        prefix=api_key_display_prefix(secret),
    )


def _oauth_token_verify(*, token: str, now: datetime) -> Credential:
    if not oauth_access_token_well_formed(token):
        raise _invalid("The OAuth access token is malformed or mistyped (its checksum does not match).")
    access_token = oauth_access_token_snapshot_get(token=token)
    if access_token is None:
        # Revoked access tokens are deleted, so "revoked" and "never existed" look the same here.
        raise _invalid("The OAuth access token is not valid or has been revoked.")
    if access_token.expires <= now:
        raise AuthenticationFailed("The OAuth access token has expired.", code=EXPIRED_API_KEY)
    if not access_token.has_user:
        raise _invalid("The OAuth access token does not act for a user.")
    _require_active_user(active=access_token.user_active)
    account = access_token.account
    if account is None:
        raise _invalid("The OAuth access token's user has no account.")
    return Credential(
        kind="oauth",
        id=access_token.id,
        account=account,
        bound_group=None,
        scopes=access_token.scopes,
        label=access_token.label,
    )


def _require_active_user(*, active: bool) -> None:
    if not active:
        raise _invalid("The credential belongs to a deactivated user.")


class CredentialAuthentication(BaseAuthentication):
    """API key or OAuth access token from `Authorization: Bearer`, `x-api-key` or `x-goog-api-key`."""

    def authenticate(self, request: Request) -> tuple[User | SimpleLazyObject, Credential] | None:
        secret = credential_from_request(request=request)
        if secret is None:
            return None
        credential = credential_verify(secret=secret)
        # DRF's request.user: loaded only if something reads it (nothing under /v1 does today).
        user_id = credential.account.user_id
        return SimpleLazyObject(lambda: User.objects.get(pk=user_id)), credential

    def authenticate_header(self, request: Request) -> str:
        return WWW_AUTHENTICATE
