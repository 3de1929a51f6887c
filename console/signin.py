"""The throttle on failed console sign-ins.

Each sign-in costs a password hash (~0.65 s of PBKDF2), so a few clients looping on the sign-in page
would otherwise keep the workers busy hashing. Failures are counted per client address and per
username (case-insensitive, whether or not it exists, so the answer says nothing about which
usernames do) in fixed windows of GATEWAY_SIGNIN_WINDOW_SECONDS over the Django cache
(django-ratelimit, as billing.limits counts API calls).

Each sign-in takes its attempt from both budgets before its password is checked, with one atomic
increment per budget, and gives it back when it was not a failure (the password was right, or the
sign-in was refused unchecked). So however many sign-ins run at once, at most the limit of wrong
passwords is ever checked per window: an attempt that finds a budget used up is refused before its
password is hashed, until the window ends. A budget is two counters of django-ratelimit's (attempts
taken, attempts given back, in the same windows): what is left is the limit minus the difference,
the given-back counter read before the attempt is taken so that it only holds attempts taken before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest
from django_ratelimit.core import get_usage

from core.db import pooled_connection_release_idle

ADDRESS_GROUP = "igw.signin.failures.address"
ACCOUNT_GROUP = "igw.signin.failures.account"
GIVEN_BACK = ".given-back"


@dataclass(frozen=True)
class _Counter:
    group: str
    key: str
    limit: int


@dataclass(frozen=True)
class SigninAttempt:
    """An attempt taken from the budgets of `counters`; `wait`: seconds until a sign-in may be tried
    again when a budget was used up (the attempt was then given back at once)."""

    counters: tuple[_Counter, ...]
    wait: int | None


def _counters(*, request: HttpRequest, username: str) -> tuple[_Counter, ...]:
    # REMOTE_ADDR: gunicorn's peer, or the proxy's; behind a proxy every client shares the proxy's
    # address, so the proxy must pass on the client's (README, "Production").
    address = request.META.get("REMOTE_ADDR") or "unknown"
    return (
        _Counter(ADDRESS_GROUP, address, settings.GATEWAY_SIGNIN_FAILURES_PER_ADDRESS),
        _Counter(ACCOUNT_GROUP, username.strip().casefold(), settings.GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT),
    )


def _usage(counter: _Counter, *, group: str, increment: bool) -> dict | None:
    return get_usage(
        None,
        group=group,
        key=lambda _group, _request: counter.key,
        rate=(counter.limit, settings.GATEWAY_SIGNIN_WINDOW_SECONDS),
        increment=increment,
    )


def signin_attempt_take(*, request: HttpRequest, username: str) -> SigninAttempt:
    """Take one attempt from the address's and the username's budgets. With `wait` set, a budget was
    used up: the sign-in must be refused without checking its password (its attempt is already given
    back); otherwise the caller checks it and gives the attempt back unless the password was wrong."""
    counters = _counters(request=request, username=username)
    waits = []
    for counter in counters:
        given_back = _usage(counter, group=counter.group + GIVEN_BACK, increment=False)
        taken = _usage(counter, group=counter.group, increment=True)
        if taken is not None and taken["count"] - (given_back or {"count": 0})["count"] > counter.limit:
            waits.append(max(1, taken["time_left"]))
    attempt = SigninAttempt(counters=counters, wait=max(waits) if waits else None)
    if attempt.wait is not None:
        signin_attempt_give_back(attempt=attempt)
    return attempt


def signin_attempt_give_back(*, attempt: SigninAttempt) -> None:
    """The attempt was not a failed sign-in: it no longer counts against either budget."""
    for counter in attempt.counters:
        _usage(counter, group=counter.group + GIVEN_BACK, increment=True)


def signin_unlock(*, username: str = "", address: str = "") -> int:
    """Staff's unlock: give back every failed attempt counted in the current window against
    `username` and/or `address`, so that their next sign-in is checked at once. Returns how many
    attempts were given back."""
    counters = []
    if username:
        counters.append(
            _Counter(ACCOUNT_GROUP, username.strip().casefold(), settings.GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT)
        )
    if address:
        counters.append(_Counter(ADDRESS_GROUP, address, settings.GATEWAY_SIGNIN_FAILURES_PER_ADDRESS))
    freed = 0
    for counter in counters:
        taken = _usage(counter, group=counter.group, increment=False)
        given_back = _usage(counter, group=counter.group + GIVEN_BACK, increment=False)
        if taken is None or given_back is None:
            continue
        for _ in range(max(0, taken["count"] - given_back["count"])):
            _usage(counter, group=counter.group + GIVEN_BACK, increment=True)
            freed += 1
    return freed


_in_flight: threading.BoundedSemaphore | None = None
_in_flight_lock = threading.Lock()


@contextmanager
def signin_turn() -> Iterator[bool]:
    """Wait for one of the process's GATEWAY_SIGNIN_CONCURRENCY sign-in turns (at most
    GATEWAY_SIGNIN_WAIT_SECONDS); yields whether it got one. A burst of sign-ins then hashes a few
    passwords at a time and holds no database connection while it waits (the request's own is given
    back first), so the process's billed calls keep their CPU and connections. Under gevent the
    threading module is gevent's: a waiting sign-in parks only its greenlet."""
    global _in_flight
    with _in_flight_lock:
        if _in_flight is None:
            _in_flight = threading.BoundedSemaphore(settings.GATEWAY_SIGNIN_CONCURRENCY)
        turns = _in_flight
    pooled_connection_release_idle()
    acquired = turns.acquire(timeout=settings.GATEWAY_SIGNIN_WAIT_SECONDS)
    try:
        yield acquired
    finally:
        if acquired:
            turns.release()
