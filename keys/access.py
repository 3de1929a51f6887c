"""Decisions about the credential itself, before any group or model: where an API key may be used
from (`key_address_check`), and who may use the staff provisioning API (`admin_provision_check`).

A key's `allowed_ips` (keys.credentials.KeyLimits.allowed_networks): when the list is not empty, a
call from an address in none of its networks is refused with 403 `ip_not_allowed`, on every endpoint
the key authenticates. The address is the one api.middleware.ForwardedHeadersMiddleware leaves in
REMOTE_ADDR: the peer's, or, behind a proxy in GATEWAY_TRUSTED_PROXIES only, the client's from
X-Forwarded-For. An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, what a dual-stack socket reports)
is matched as the IPv4 address it carries.

The provisioning API (/v1/admin/...):

- An OAuth token needs the `admin:provision` scope (else 403 `insufficient_scope`), and its user
  must be staff.
- A manual API key counts as a staff credential when its account's user is staff: keys are not
  scope-limited, so a staff user's key acts with that user's powers.
- In both cases `is_staff` (and `is_active`) is read from the database at every call, not from the
  credential cache: taking staff away from a user stops their credentials at the next request
  (else 403 `staff_required`).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

from accounts.models import User
from keys.credentials import SCOPE_ADMIN_PROVISION, Credential
from keys.errors import IpNotAllowed, ScopeMissing, StaffRequired


def _caller_addresses(address: str | None) -> tuple[IPv4Address | IPv6Address, ...]:
    """The forms `address` may be matched in: itself, and the IPv4 address an IPv4-mapped IPv6
    address carries; none when it does not parse."""
    try:
        ip = ip_address((address or "").strip())
    except ValueError:
        return ()
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped, ip)
    return (ip,)


def key_address_check(*, credential: Credential, address: str | None) -> None:
    """Raise 403 `ip_not_allowed` unless the key may be used from `address` (the caller's, as the
    trusted-proxy rules leave it): any address when the key lists no network, else one inside a
    listed network. No address, or one that does not parse (a UNIX socket's peer), is inside none."""
    networks = credential.limits.allowed_networks
    if not networks:
        return
    forms = _caller_addresses(address)
    # `in` is False across versions (an IPv4 address in an IPv6 network), never an error.
    if any(ip in network for ip in forms for network in networks):
        return
    shown = str(forms[0]) if forms else "an unknown address"
    raise IpNotAllowed(
        f"This API key may not be used from {shown}: the address is not in the key's allowed "
        "networks. Call from an allowed address, or ask the key's owner to add this one."
    )


def admin_provision_check(*, credential: Credential) -> User:
    """The staff user the credential acts for; raises 403 unless it may use the provisioning API."""
    if credential.kind == "oauth" and SCOPE_ADMIN_PROVISION not in credential.scopes:
        raise ScopeMissing(
            f"This token may not use the provisioning API: it needs the scope {SCOPE_ADMIN_PROVISION!r}, "
            "which only a staff user's token can hold."
        )
    user = User.objects.filter(pk=credential.account.user_id, is_active=True, is_staff=True).first()
    if credential.kind not in ("api_key", "oauth") or user is None:
        raise StaffRequired(
            "The provisioning API is for staff users only; this credential's user is not staff."
        )
    return user
