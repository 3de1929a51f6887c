"""The gateway's error model: domain errors, the HTTP error hierarchy and the spec's three body shapes.

The domain apps (accounts, billing, groups, keys, upstreams) raise `DomainError` subclasses, which
carry what the domain knows and nothing of HTTP. The endpoint apps raise `ApiError` (or a subclass)
for what is about the request itself. `api/errors.py` maps every domain error class to its status,
type and headers, and its exception handler and `api.middleware.ApiErrorMiddleware` are the only
places that turn exceptions into responses, through `error_response`.

Shapes (spec, "Body shapes"):
- compatible: {"error": {"message", "type", "code", "param"}} for /v1/images/*, /v1/chat/completions,
  /v1/responses, /v1/models, /v1/me and every other /v1 path by default;
- native: {"type": "error", "error": {"type", "message"}} for /v1/messages and
  /v1/messages/count_tokens; the business code goes into the message and an `x-error-code` header;
- google: {"error": {"code": <int>, "message", "status"}}, used when passing through an upstream that
  speaks it.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

from django.http import HttpRequest, JsonResponse
from rest_framework.request import Request

logger = logging.getLogger("gateway.errors")

Shape = Literal["compatible", "native", "google"]

# Business codes (spec, "Gateway business error codes"), for the `code` of the errors that carry them.
GROUP_DELETED = "GROUP_DELETED"  # 403: the bound/current group has been deleted
GROUP_DISABLED = "GROUP_DISABLED"  # 403: the bound/current group has been disabled
GROUP_NOT_ALLOWED = "GROUP_NOT_ALLOWED"  # 403: the selected group is not among the account's groups
GROUP_OVERRIDE_UNSUPPORTED = "GROUP_OVERRIDE_UNSUPPORTED"  # 409: no `<group_id>:<model>` here
GROUP_UNAVAILABLE = "GROUP_UNAVAILABLE"  # 400: the group is missing or unavailable
SUBSCRIPTION_NOT_FOUND = "SUBSCRIPTION_NOT_FOUND"  # 403: no subscription, or it has expired
SUBSCRIPTION_INVALID = "SUBSCRIPTION_INVALID"  # 403: the plan does not match the request
USAGE_LIMIT_EXCEEDED = "USAGE_LIMIT_EXCEEDED"  # 429: daily/weekly/monthly/total cap reached
INSUFFICIENT_BALANCE = "INSUFFICIENT_BALANCE"  # 402/403: balance too low

# Credential codes (401 authentication_error unless noted).
MISSING_API_KEY = "missing_api_key"
INVALID_API_KEY = "invalid_api_key"
REVOKED_API_KEY = "revoked_api_key"
EXPIRED_API_KEY = "expired_api_key"
MULTIPLE_CREDENTIALS = "multiple_credentials"  # 400 invalid_request_error
API_KEY_IN_QUERY_DEPRECATED = "api_key_in_query_deprecated"  # 400 invalid_request_error
INSUFFICIENT_SCOPE = "insufficient_scope"  # 403 permission_error

# Model and capability codes.
MODEL_NOT_FOUND = "model_not_found"  # 404
MODEL_NOT_ALLOWED = "model_not_allowed"  # 403 permission_error
IP_NOT_ALLOWED = "ip_not_allowed"  # 403 permission_error: the caller's address is not in the key's list
IMAGE_GROUP_REQUIRED = "image_group_required"  # 403 permission_error
MISSING_REQUIRED_PARAMETER = "missing_required_parameter"  # 400
INVALID_VALUE = "invalid_value"  # 400: a field's value is out of its range or does not parse

# Paths whose errors use the native shape; everything else under /v1 uses the compatible shape.
NATIVE_SHAPE_PREFIXES = ("/v1/messages",)

# Google's canonical status names, for the second native shape.
GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    402: "RESOURCE_EXHAUSTED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

# The broad `type` for a status when nothing more specific is known.
TYPE_FOR_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "upstream_error",
    504: "upstream_error",
}


class DomainError(Exception):
    """A rule of the domain refused an operation. `code` is the spec's business code for it (what the
    usage record keeps as the reason); `retry_after` says in how many seconds trying again can succeed
    (None: waiting does not help). Each subclass has its one status, type and headers in
    api.errors.DOMAIN_ERRORS."""

    code: str = "domain_error"

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        param: str | None = None,
        final: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        # The request field the refusal is about, when only the raiser knows it (else the table's).
        self.param = param
        # No retry can succeed, however long the caller waits (a quota that never resets).
        self.final = final


class ApiError(Exception):
    """An error answered to an API caller. Subclasses set the defaults; callers may override."""

    status: int = 400
    type: str = "invalid_request_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        status: int | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
        retry_after: float | None = None,
        final: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        # No retry can succeed: the answer says so (`x-should-retry: false`) and names no wait.
        self.final = final
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.param = param
        self.headers = dict(headers or {})
        if retry_after is not None:
            # Whole seconds, rounded up, never 0: a client that waits 0 s just hammers us.
            self.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))


class InvalidRequest(ApiError):
    status = 400
    type = "invalid_request_error"


class AuthenticationFailed(ApiError):
    status = 401
    type = "authentication_error"


class PermissionDenied(ApiError):
    status = 403
    type = "permission_error"


class NotFound(ApiError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(ApiError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class Conflict(ApiError):
    status = 409
    type = "invalid_request_error"


class PayloadTooLarge(ApiError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedContentType(ApiError):
    """A request body in a media type the endpoint does not read."""

    status = 415
    type = "invalid_request_error"
    code = "unsupported_content_type"


class RateLimited(ApiError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class Overloaded(ApiError):
    """This process cannot serve a new call in time now (api/shedding.py); another process or node
    can, or this one shortly (Retry-After). Nothing was reserved or charged."""

    status = 503
    type = "server_error"
    code = "overloaded"


class UpstreamFailed(ApiError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


class InternalError(ApiError):
    status = 500
    type = "api_error"
    code = "internal_error"


class PassthroughError(ApiError):
    """An upstream's own error body, answered as the upstream gave it (spec: native formats pass through)."""

    def __init__(
        self, *, status: int, body: dict[str, Any], message: str, shape: Shape, code: str | None = None
    ) -> None:
        # `code` is the upstream's own code (or error type): the usage record keeps it as the reason.
        super().__init__(message, status=status, type=TYPE_FOR_STATUS.get(status, "api_error"), code=code)
        self.body = body
        self.shape = shape


def shape_for_path(path: str) -> Shape:
    return "native" if path.startswith(NATIVE_SHAPE_PREFIXES) else "compatible"


def _with_request_id(message: str, request_id: str | None) -> str:
    if not request_id or request_id in message:
        return message
    return f"{message} (request id: {request_id})"


def compatible_body(error: ApiError, *, request_id: str | None) -> dict[str, Any]:
    return {
        "error": {
            "message": _with_request_id(error.message, request_id),
            "type": error.type,
            "param": error.param,
            "code": error.code,
        }
    }


# Anthropic's error types by status, where ours differ (its SDK picks an exception class by status;
# callers branch on the type): https://docs.anthropic.com/en/api/errors
NATIVE_TYPE_FOR_STATUS = {
    404: "not_found_error",
    413: "request_too_large",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
    529: "overloaded_error",
}


def native_body(error: ApiError, *, request_id: str | None) -> dict[str, Any]:
    message = error.message if not error.code else f"{error.code}: {error.message}"
    error_type = NATIVE_TYPE_FOR_STATUS.get(error.status, error.type)
    if error_type == "upstream_error":
        error_type = "api_error"
    return {"type": "error", "error": {"type": error_type, "message": _with_request_id(message, request_id)}}


def google_body(error: ApiError, *, request_id: str | None) -> dict[str, Any]:
    # The spec writes the status in lowercase (permission_denied, resource_exhausted, ...); upstream
    # bodies passed through (api/upstream_errors.py) are lowercased the same way.
    return {
        "error": {
            "code": error.status,
            "message": _with_request_id(error.message, request_id),
            "status": GOOGLE_STATUS.get(error.status, "UNKNOWN").lower(),
        }
    }


BODY_BUILDERS = {"compatible": compatible_body, "native": native_body, "google": google_body}


# Statuses the official SDKs would retry on their own (they retry 408, 409, 429 and 5xx) although
# retrying cannot help: a 409 here is a configuration conflict, not a lock timeout, and a 502/504 comes
# after the gateway has already spent its own retries on the upstreams. With `x-should-retry: false`
# (honoured by the openai and anthropic SDKs) the caller's request is sent once.
_RETRYABLE_STATUSES = frozenset({408, 429, 500, 503})


def retry_pointless(status: int) -> bool:
    """Whether an answer with this status is one a client's retry cannot change: every 4xx but 408
    and 429, and 502/504 (built after the gateway's own retries)."""
    return (400 <= status < 500 or status in (502, 504)) and status not in _RETRYABLE_STATUSES


def error_response(
    error: ApiError, *, request: HttpRequest | Request | None, shape: Shape | None = None
) -> JsonResponse:
    """The one place an ApiError becomes an HTTP response (upstream bodies passed through included)."""
    request_id = getattr(request, "request_id", None)
    path = request.path if request is not None else ""
    if isinstance(error, PassthroughError):
        body = error.body
    else:
        chosen = shape or shape_for_path(path)
        body = BODY_BUILDERS[chosen](error, request_id=request_id)
    response = JsonResponse(body, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    if error.code and (shape or shape_for_path(path)) == "native":
        response["x-error-code"] = error.code
    if error.status in (429, 503) and "Retry-After" not in response and not error.final:
        response["Retry-After"] = "1"
    if error.status == 401 and "WWW-Authenticate" not in response:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    if error.final or retry_pointless(error.status):
        response["x-should-retry"] = "false"
    return response
