"""DRF authentication for the /v1 API: manual API keys and OAuth access tokens, from headers only.

`CredentialAuthentication.authenticate` returns `(user, Credential)`, returns None when no credential
header is present (the view's permission then answers 401 `missing_api_key`), and raises a domain
error of keys/errors.py for everything else (api/errors.py maps it):

- `?key=` / `?api_key=` in the query string: 400 `api_key_in_query_deprecated` (with or without a header);
- two credential headers with different values: 400 `multiple_credentials`;
- a credential that is not usable: what keys.authentication.credential_verify says (401);
- an API key used from an address outside its `allowed_ips`: 403 `ip_not_allowed`
  (keys.access.key_address_check, on the address api.middleware.ForwardedHeadersMiddleware leaves).

Nothing here logs or echoes a credential.
"""

from __future__ import annotations

from django.utils.functional import SimpleLazyObject
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from accounts.models import User
from keys.access import key_address_check
from keys.authentication import credential_verify
from keys.credentials import Credential
from keys.errors import CredentialInQuery, CredentialInvalid, CredentialsConflicting

# The headers a credential may come in (spec, Authentication rules 2 and 4), as WSGI META names.
CREDENTIAL_HEADERS = {
    "HTTP_AUTHORIZATION": "Authorization",
    "HTTP_X_API_KEY": "x-api-key",
    "HTTP_X_GOOG_API_KEY": "x-goog-api-key",
}
QUERY_CREDENTIAL_PARAMS = ("key", "api_key")
WWW_AUTHENTICATE = 'Bearer realm="api"'


def credential_from_request(*, request: Request) -> str | None:
    """The credential the request carries in its headers, or None when it carries none.

    Raises for a credential in the query string, for two headers that disagree, and for an
    Authorization header that is not `Bearer <credential>`.
    """
    query = request.query_params
    if any(name in query for name in QUERY_CREDENTIAL_PARAMS):
        raise CredentialInQuery(
            "API keys must not be passed in the query string (?key= or ?api_key=): the query string "
            "ends up in logs and browser history. Send the key in the Authorization header instead: "
            "'Authorization: Bearer <API_KEY>'."
        )
    found: dict[str, str] = {}
    for meta_name, header in CREDENTIAL_HEADERS.items():
        value = request.META.get(meta_name, "").strip()
        if not value:
            continue
        if header == "Authorization":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer":
                raise CredentialInvalid("The Authorization header must have the form 'Bearer <API_KEY>'.")
            value = token.strip()
            if not value:
                continue
        found[header] = value
    if len(set(found.values())) > 1:
        raise CredentialsConflicting(
            f"The request carries different credentials in {', '.join(sorted(found))}. "
            "Send exactly one, preferably as 'Authorization: Bearer <API_KEY>'."
        )
    return next(iter(found.values()), None)


class CredentialAuthentication(BaseAuthentication):
    """API key or OAuth access token from `Authorization: Bearer`, `x-api-key` or `x-goog-api-key`."""

    def authenticate(self, request: Request) -> tuple[User | SimpleLazyObject, Credential] | None:
        secret = credential_from_request(request=request)
        if secret is None:
            return None
        credential = credential_verify(secret=secret)
        # REMOTE_ADDR: the client's only behind a trusted proxy (ForwardedHeadersMiddleware).
        key_address_check(credential=credential, address=request.META.get("REMOTE_ADDR"))
        # DRF's request.user: loaded only if something reads it (nothing under /v1 does today).
        user_id = credential.account.user_id
        return SimpleLazyObject(lambda: User.objects.get(pk=user_id)), credential

    def authenticate_header(self, request: Request) -> str:
        return WWW_AUTHENTICATE
