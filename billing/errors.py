"""What billing refuses: money, plans, caps, limits and idempotency keys, as domain errors.

Each carries its message, the spec's business code and, where waiting helps, `retry_after` in
seconds; api.errors.DOMAIN_ERRORS says how each is answered over HTTP.
"""

from __future__ import annotations

from core.errors import (
    INSUFFICIENT_BALANCE,
    SUBSCRIPTION_INVALID,
    SUBSCRIPTION_NOT_FOUND,
    USAGE_LIMIT_EXCEEDED,
    DomainError,
)


class InsufficientBalance(DomainError):
    """The account's available balance does not cover the call's price."""

    code = INSUFFICIENT_BALANCE


class SubscriptionNotFound(DomainError):
    """The group bills by subscription and the account has none active for it."""

    code = SUBSCRIPTION_NOT_FOUND


class SubscriptionInvalid(DomainError):
    """The account's subscription does not cover the requested model."""

    code = SUBSCRIPTION_INVALID


class UsageLimitExceeded(DomainError):
    """The call would go over a subscription cap; `retry_after`: until the last blocking window ends."""

    code = USAGE_LIMIT_EXCEEDED


class RateLimitExceeded(DomainError):
    """The credential's requests-per-minute limit is reached; `retry_after`: until its window ends."""

    code = "rate_limit_exceeded"


class ConcurrencyLimitExceeded(DomainError):
    """The credential has as many calls in flight as it may have."""

    code = "concurrency_limit_exceeded"


class LimitsUnavailable(DomainError):
    """The usage limits cannot be checked (Redis is down and the gateway fails closed)."""

    code = "limits_unavailable"


class IdempotencyKeyInvalid(DomainError):
    """An idempotency key that is not 1 to 255 printable ASCII characters."""

    code = "invalid_idempotency_key"


class IdempotencyKeyInUse(DomainError):
    """The first request with this key is still running."""

    code = "idempotency_key_in_use"


class IdempotencyKeyReused(DomainError):
    """The key was used before with a different request."""

    code = "idempotency_key_reused"
