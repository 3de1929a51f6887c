"""The webhook's signature, as Stripe signs its events: `X-Gateway-Signature: t=<unix>,v1=<hex>`, the
HMAC-SHA256 of "<t>.<body>" with the account's webhook secret. The timestamp is signed with the body,
so a receiver that refuses old timestamps refuses a replayed event (docs/billing.md, "Alerts")."""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "X-Gateway-Signature"
EVENT_ID_HEADER = "X-Gateway-Event-Id"
SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret


def webhook_secret_generate() -> str:
    return f"{SECRET_PREFIX}{secrets.token_urlsafe(32)}"


def signature_compute(*, secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of "<timestamp>.<body>" with `secret`."""
    signed = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(*, secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature_compute(secret=secret, timestamp=timestamp, body=body)}"


def signature_verify(
    *, secret: str, header: str, body: bytes, now: int, tolerance_seconds: int = 300
) -> bool:
    """What a receiver checks: a v1 signature of this body with its timestamp, made with `secret`,
    and a timestamp within `tolerance_seconds` of `now`."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_seconds:
        return False
    expected = signature_compute(secret=secret, timestamp=timestamp, body=body)
    return hmac.compare_digest(expected, parts.get("v1", ""))
