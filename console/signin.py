"""The throttle on failed console sign-ins.

Each sign-in costs a password hash (~0.65 s of PBKDF2), so a few clients looping on the sign-in page
would otherwise keep the workers busy hashing. Failures are counted per client address and per
username (case-insensitive, whether or not it exists, so the answer says nothing about which
usernames do) in fixed windows of GATEWAY_SIGNIN_WINDOW_SECONDS over the Django cache
(django-ratelimit, as billing.limits counts API calls). Past either limit the sign-in is refused
before the password is checked, until the window ends. Successful sign-ins are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest
from django_ratelimit.core import get_usage

ADDRESS_GROUP = "igw.signin.failures.address"
ACCOUNT_GROUP = "igw.signin.failures.account"


@dataclass(frozen=True)
class _Counter:
    group: str
    key: str
    limit: int


def _counters(*, request: HttpRequest, username: str) -> list[_Counter]:
    # REMOTE_ADDR: gunicorn's peer, or the proxy's; behind a proxy every client shares the proxy's
    # address, so the proxy must pass on the client's (README, "Production").
    address = request.META.get("REMOTE_ADDR") or "unknown"
    return [
        _Counter(ADDRESS_GROUP, address, settings.GATEWAY_SIGNIN_FAILURES_PER_ADDRESS),
        _Counter(ACCOUNT_GROUP, username.strip().casefold(), settings.GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT),
    ]


def _usage(counter: _Counter, *, increment: bool) -> dict | None:
    return get_usage(
        None,
        group=counter.group,
        key=lambda _group, _request: counter.key,
        rate=(counter.limit, settings.GATEWAY_SIGNIN_WINDOW_SECONDS),
        increment=increment,
    )


def signin_throttle_wait(*, request: HttpRequest, username: str) -> int | None:
    """Seconds until a sign-in may be tried again, when the address or the username has used up its
    failures in this window; None when it may be tried now."""
    waits = []
    for counter in _counters(request=request, username=username):
        usage = _usage(counter, increment=False)
        if usage is not None and usage["count"] >= counter.limit:
            waits.append(max(1, usage["time_left"]))
    return max(waits) if waits else None


def signin_failure_record(*, request: HttpRequest, username: str) -> None:
    """Count one failed sign-in against the address and the username."""
    for counter in _counters(request=request, username=username):
        _usage(counter, increment=True)
