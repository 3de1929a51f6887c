"""The one mapping from exceptions to HTTP errors, and DRF's exception handler that applies it.

The domain apps raise `core.errors.DomainError` subclasses that know nothing of HTTP. `DOMAIN_ERRORS`
says, for each class, the status and `type` it is answered with (and the request field it is about,
when there is one); the error's own `code` is the business code and its `retry_after` becomes the
`Retry-After` header. `api_error_from_exception` turns any exception that is expected into an
`ApiError`, which `core.errors.error_response` renders in the family's shape (compatible, or native
for /v1/messages). `drf_exception_handler` (DRF's EXCEPTION_HANDLER) and
`api.middleware.ApiErrorMiddleware` are the only places that build error responses; the usage
record, the stream relays and the console read a domain error's status through `api_error_for`.
An upstream attempt's own failure (`upstreams.errors.UpstreamError`, the provider's status and body)
is answered by api/upstream_errors.py, which needs the upstream to scrub what it passes through.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import JsonResponse
from rest_framework import exceptions as drf_exceptions

from billing import errors as billing
from core.errors import (
    INVALID_API_KEY,
    MISSING_API_KEY,
    TYPE_FOR_STATUS,
    ApiError,
    AuthenticationFailed,
    DomainError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    UnsupportedContentType,
    error_response,
)
from groups import errors as groups
from keys import errors as keys
from notifications import errors as notifications
from upstreams import errors as upstreams

logger = logging.getLogger("gateway.errors")


@dataclass(frozen=True)
class HttpError:
    """How a domain error class is answered: its status, its `type`, and the request field it is
    about (`param`), if any."""

    status: int
    type: str
    param: str | None = None


_BAD_REQUEST = HttpError(400, "invalid_request_error")
_UNAUTHENTICATED = HttpError(401, "authentication_error")
_FORBIDDEN = HttpError(403, "permission_error")
_NOT_PAYABLE = HttpError(403, "billing_error")
_CONFLICT = HttpError(409, "invalid_request_error")
_TOO_MANY = HttpError(429, "rate_limit_error")
_UPSTREAM_UNAVAILABLE = HttpError(503, "upstream_error")

DOMAIN_ERRORS: dict[type[DomainError], HttpError] = {
    # billing
    billing.InsufficientBalance: _NOT_PAYABLE,
    billing.SubscriptionNotFound: _NOT_PAYABLE,
    billing.SubscriptionInvalid: HttpError(403, "billing_error", param="model"),
    billing.UsageLimitExceeded: _TOO_MANY,
    billing.RateLimitExceeded: _TOO_MANY,
    billing.ConcurrencyLimitExceeded: _TOO_MANY,
    billing.LimitsUnavailable: HttpError(503, "api_error"),
    billing.IdempotencyKeyInvalid: _BAD_REQUEST,
    billing.IdempotencyKeyInUse: _CONFLICT,
    billing.IdempotencyKeyReused: HttpError(422, "invalid_request_error"),
    # groups
    groups.GroupDeleted: _FORBIDDEN,
    groups.GroupDisabled: _FORBIDDEN,
    groups.GroupUnavailable: _BAD_REQUEST,
    # keys
    keys.CredentialInvalid: _UNAUTHENTICATED,
    keys.CredentialRevoked: _UNAUTHENTICATED,
    keys.CredentialExpired: _UNAUTHENTICATED,
    keys.CredentialInQuery: _BAD_REQUEST,
    keys.CredentialsConflicting: _BAD_REQUEST,
    keys.ScopeMissing: _FORBIDDEN,
    keys.StaffRequired: _FORBIDDEN,
    keys.GroupNotAllowed: _FORBIDDEN,
    keys.GroupOverrideUnsupported: _CONFLICT,
    keys.ModelNotAllowedForKey: HttpError(403, "permission_error", param="model"),
    keys.IpNotAllowed: _FORBIDDEN,
    keys.KeyLimitsInvalid: _BAD_REQUEST,
    # notifications
    notifications.AlertSettingsInvalid: _BAD_REQUEST,
    # upstreams: the retry policy's outcomes (one attempt's UpstreamError: api/upstream_errors.py)
    upstreams.NoUpstreamAvailable: _UPSTREAM_UNAVAILABLE,
    upstreams.UpstreamsCircuitOpen: _UPSTREAM_UNAVAILABLE,
    upstreams.UpstreamsOverloaded: _UPSTREAM_UNAVAILABLE,
    upstreams.UpstreamsRateLimited: _TOO_MANY,
    upstreams.UpstreamsFailed: HttpError(502, "upstream_error"),
    upstreams.UpstreamDeadlineExceeded: HttpError(504, "upstream_error"),
    upstreams.UrlRefused: _BAD_REQUEST,
}


def api_error_for(error: DomainError | ApiError) -> ApiError:
    """The HTTP error a domain error is answered with (`DOMAIN_ERRORS`); an ApiError is its own. A
    class that is not in the table (a subclass of one that is takes its parent's) is a gateway bug:
    500, logged."""
    if isinstance(error, ApiError):
        return error
    http = next((DOMAIN_ERRORS[cls] for cls in type(error).__mro__ if cls in DOMAIN_ERRORS), None)
    if http is None:
        logger.error("no HTTP answer for the domain error %s: %s", type(error).__name__, error.message)
        return InternalError("The gateway hit an internal error; it has been logged.")
    return ApiError(
        error.message,
        status=http.status,
        type=http.type,
        code=error.code,
        param=error.param or http.param,
        retry_after=error.retry_after,
        final=error.final,
    )


def api_error_from_exception(exc: BaseException) -> ApiError | None:
    """The ApiError for a domain, framework or API exception; None when it is not an expected one."""
    if isinstance(exc, (ApiError, DomainError)):
        return api_error_for(exc)
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge("The request body is larger than this endpoint accepts.")
    if isinstance(exc, TooManyFieldsSent):
        return InvalidRequest("The request has too many form fields.", code="too_many_fields")
    if isinstance(exc, drf_exceptions.ParseError):
        return InvalidRequest(f"The request body is not valid JSON: {exc.detail}", code="invalid_json")
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return UnsupportedContentType(str(exc.detail))
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return MethodNotAllowed(str(exc.detail))
    if isinstance(exc, drf_exceptions.NotAuthenticated):
        return AuthenticationFailed(str(exc.detail), code=MISSING_API_KEY)
    if isinstance(exc, drf_exceptions.AuthenticationFailed):
        return AuthenticationFailed(str(exc.detail), code=INVALID_API_KEY)
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return PermissionDenied(str(exc.detail), code="permission_denied")
    if isinstance(exc, drf_exceptions.NotFound):
        return NotFound(str(exc.detail))
    if isinstance(exc, drf_exceptions.Throttled):
        # DRF's Throttled sets `wait` in __init__; djangorestframework-stubs do not declare it.
        return RateLimited(str(exc.detail), retry_after=exc.wait or 1)  # type: ignore[attr-defined]
    if isinstance(exc, drf_exceptions.APIException):
        return ApiError(
            str(exc.detail), status=exc.status_code, type=TYPE_FOR_STATUS.get(exc.status_code, "api_error")
        )
    return None


def drf_exception_handler(exc: Exception, context: dict[str, Any]) -> JsonResponse | None:
    """DRF's EXCEPTION_HANDLER: every error raised in a DRF view leaves through here."""
    # DRF's Request hands `path` and `request_id` through to Django's request.
    request = context.get("request")
    error = api_error_from_exception(exc)
    if error is None:
        return None  # unexpected: let ApiErrorMiddleware log it and answer 500
    # A view picks its body shape per request with `get_error_shape()` (api.base.GatewayAPIView:
    # its `error_shape` by default); else the path decides.
    view = context.get("view")
    error_shape = getattr(view, "get_error_shape", None)
    shape = error_shape() if error_shape is not None else None
    return error_response(error, request=request, shape=shape)
