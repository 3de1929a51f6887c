"""What the credential checks and access decisions refuse, as domain errors. api.errors maps each to
its HTTP answer."""

from __future__ import annotations

from core.errors import (
    API_KEY_IN_QUERY_DEPRECATED,
    EXPIRED_API_KEY,
    GROUP_NOT_ALLOWED,
    GROUP_OVERRIDE_UNSUPPORTED,
    INSUFFICIENT_SCOPE,
    INVALID_API_KEY,
    INVALID_VALUE,
    IP_NOT_ALLOWED,
    MODEL_NOT_ALLOWED,
    MULTIPLE_CREDENTIALS,
    REVOKED_API_KEY,
    DomainError,
)


class CredentialInvalid(DomainError):
    """A credential that is malformed, mistyped, unknown, or whose user cannot act."""

    code = INVALID_API_KEY


class CredentialRevoked(DomainError):
    code = REVOKED_API_KEY


class CredentialExpired(DomainError):
    code = EXPIRED_API_KEY


class CredentialInQuery(DomainError):
    """A credential sent in the query string, where it ends up in logs and browser history."""

    code = API_KEY_IN_QUERY_DEPRECATED


class CredentialsConflicting(DomainError):
    """Two credential headers with different values."""

    code = MULTIPLE_CREDENTIALS


class ScopeMissing(DomainError):
    """An OAuth token without the scope the operation needs."""

    code = INSUFFICIENT_SCOPE


class StaffRequired(DomainError):
    """The provisioning API, for a credential whose user is not staff."""

    code = "staff_required"


class GroupNotAllowed(DomainError):
    """The credential's account may not use the group (bound, current or selected)."""

    code = GROUP_NOT_ALLOWED


class GroupOverrideUnsupported(DomainError):
    """`<group_id>:<model>` cannot leave the current group or enter the selected one."""

    code = GROUP_OVERRIDE_UNSUPPORTED


class ModelNotAllowedForKey(DomainError):
    """The key's `models` list does not name the model asked for."""

    code = MODEL_NOT_ALLOWED


class IpNotAllowed(DomainError):
    """The caller's address is in none of the key's `allowed_ips` networks."""

    code = IP_NOT_ALLOWED


class KeyLimitsInvalid(DomainError):
    """A key limit that cannot be stored (a negative budget, a period without a budget, a CIDR that
    does not parse); `param` names the field."""

    code = INVALID_VALUE
