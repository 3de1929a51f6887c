"""Every domain error class of the domain apps, by name, and how the spec says each is answered."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from billing import errors as billing
from core.errors import DomainError
from groups import errors as groups
from keys import errors as keys
from notifications import errors as notifications
from upstreams import errors as upstreams

DOMAIN_APPS = ("accounts", "billing", "groups", "keys", "notifications", "upstreams")
BAD, AUTH, DENIED = "invalid_request_error", "authentication_error", "permission_error"
LIMITED, BILLING = "rate_limit_error", "billing_error"

# class: (status, compatible type, native type (Anthropic's, for /v1/messages), code)
ANSWERS: dict[type[DomainError], tuple[int, str, str, str]] = {
    billing.InsufficientBalance: (403, BILLING, BILLING, "INSUFFICIENT_BALANCE"),
    billing.SubscriptionNotFound: (403, BILLING, BILLING, "SUBSCRIPTION_NOT_FOUND"),
    billing.SubscriptionInvalid: (403, BILLING, BILLING, "SUBSCRIPTION_INVALID"),
    billing.UsageLimitExceeded: (429, LIMITED, LIMITED, "USAGE_LIMIT_EXCEEDED"),
    billing.RateLimitExceeded: (429, LIMITED, LIMITED, "rate_limit_exceeded"),
    billing.ConcurrencyLimitExceeded: (
        429,
        LIMITED,
        LIMITED,
        "concurrency_limit_exceeded",
    ),
    billing.LimitsUnavailable: (503, "api_error", "overloaded_error", "limits_unavailable"),
    billing.IdempotencyKeyInvalid: (
        400,
        BAD,
        BAD,
        "invalid_idempotency_key",
    ),
    billing.IdempotencyKeyInUse: (
        409,
        BAD,
        BAD,
        "idempotency_key_in_use",
    ),
    billing.IdempotencyKeyReused: (
        422,
        BAD,
        BAD,
        "idempotency_key_reused",
    ),
    groups.GroupDeleted: (403, DENIED, DENIED, "GROUP_DELETED"),
    groups.GroupDisabled: (403, DENIED, DENIED, "GROUP_DISABLED"),
    groups.GroupUnavailable: (400, BAD, BAD, "GROUP_UNAVAILABLE"),
    keys.CredentialInvalid: (401, AUTH, AUTH, "invalid_api_key"),
    keys.CredentialRevoked: (401, AUTH, AUTH, "revoked_api_key"),
    keys.CredentialExpired: (401, AUTH, AUTH, "expired_api_key"),
    keys.CredentialInQuery: (
        400,
        BAD,
        BAD,
        "api_key_in_query_deprecated",
    ),
    keys.CredentialsConflicting: (
        400,
        BAD,
        BAD,
        "multiple_credentials",
    ),
    keys.ScopeMissing: (403, DENIED, DENIED, "insufficient_scope"),
    keys.StaffRequired: (403, DENIED, DENIED, "staff_required"),
    keys.GroupNotAllowed: (403, DENIED, DENIED, "GROUP_NOT_ALLOWED"),
    keys.GroupOverrideUnsupported: (
        409,
        BAD,
        BAD,
        "GROUP_OVERRIDE_UNSUPPORTED",
    ),
    keys.ModelNotAllowedForKey: (403, DENIED, DENIED, "model_not_allowed"),
    keys.IpNotAllowed: (403, DENIED, DENIED, "ip_not_allowed"),
    keys.KeyLimitsInvalid: (400, BAD, BAD, "invalid_value"),
    notifications.AlertSettingsInvalid: (400, BAD, BAD, "invalid_value"),
    upstreams.NoUpstreamAvailable: (503, "upstream_error", "overloaded_error", "no_upstream_available"),
    upstreams.UpstreamsCircuitOpen: (503, "upstream_error", "overloaded_error", "upstreams_unavailable"),
    upstreams.UpstreamsOverloaded: (503, "upstream_error", "overloaded_error", "upstream_unavailable"),
    upstreams.UpstreamsRateLimited: (429, LIMITED, LIMITED, "upstream_rate_limited"),
    upstreams.UpstreamsFailed: (502, "upstream_error", "api_error", "upstream_error"),
    upstreams.UpstreamDeadlineExceeded: (504, "upstream_error", "api_error", "upstream_timeout"),
    upstreams.UrlRefused: (400, BAD, BAD, "url_refused"),
}
BY_NAME = {cls.__name__: cls for cls in ANSWERS}


def domain_error_make(name: str, *, retry_after: float | None, final: bool = False) -> DomainError:
    return BY_NAME[name](f"{name} happened.", retry_after=retry_after, final=final)


def domain_error_classes() -> set[type[DomainError]]:
    """Every DomainError subclass the domain apps define, in any of their modules."""
    root = Path(__file__).resolve().parents[2]
    for app in DOMAIN_APPS:
        for module in pkgutil.walk_packages([str(root / app)], prefix=f"{app}."):
            if ".migrations" not in module.name:
                importlib.import_module(module.name)
    found: set[type[DomainError]] = set()
    pending = list(DomainError.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.split(".")[0] in DOMAIN_APPS:
            found.add(cls)
    return found
