"""Failed console sign-ins are throttled per address and per username, before any password is hashed."""

from __future__ import annotations

import io
import uuid
from contextlib import ExitStack

import pytest
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher, check_password, make_password
from django.core.management import call_command
from django.urls import reverse

from accounts.hashers import OffloadedPBKDF2PasswordHasher
from console.signin import ACCOUNT_GROUP, ADDRESS_GROUP, signin_turn
from tests.gevent_probe import gevent_probe_run
from tests.rate_windows import window_key_fresh

pytestmark = pytest.mark.django_db

LIMIT = 3
# A test's sign-ins must fall in one fixed window: its address or username is one whose window has
# this long left (django-ratelimit staggers window edges per key).
WINDOW_LEFT_SECONDS = 60


@pytest.fixture
def limits(settings):
    settings.GATEWAY_SIGNIN_FAILURES_PER_ADDRESS = LIMIT
    settings.GATEWAY_SIGNIN_FAILURES_PER_ACCOUNT = LIMIT


def _any_address() -> str:
    number = uuid.uuid4().int
    return f"10.{number % 250}.{number // 250 % 250}.{number // 62500 % 250 + 1}"


def _address() -> str:
    """A fresh address per test: the counts live in the cache (Redis keeps them between runs)."""
    return window_key_fresh(
        group=ADDRESS_GROUP,
        period=settings.GATEWAY_SIGNIN_WINDOW_SECONDS,
        candidate=_any_address,
        seconds=WINDOW_LEFT_SECONDS,
    )


def _username() -> str:
    """A fresh username (as the throttle counts it: case-folded) whose window has time left."""
    return window_key_fresh(
        group=ACCOUNT_GROUP,
        period=settings.GATEWAY_SIGNIN_WINDOW_SECONDS,
        candidate=lambda: f"alice-{uuid.uuid4().hex[:8]}",
        seconds=WINDOW_LEFT_SECONDS,
    )


def _sign_in(client, username: str, password: str, address: str):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


def test_it_throttles_the_next_failed_sign_in_from_one_address(client, limits):
    address = _address()
    for _ in range(LIMIT):
        response = _sign_in(client, f"nobody-{uuid.uuid4().hex}", "wrong", address)
        assert response.status_code == 200
        assert "Please enter a correct username" in response.content.decode()

    throttled = _sign_in(client, f"nobody-{uuid.uuid4().hex}", "wrong", address)

    assert throttled.status_code == 429
    assert "Too many failed sign-ins" in throttled.content.decode()
    assert int(throttled["Retry-After"]) >= 1
    # Another address is not affected.
    assert _sign_in(client, f"nobody-{uuid.uuid4().hex}", "wrong", _address()).status_code == 200


def test_it_throttles_the_next_failed_sign_in_for_one_account_from_any_address(client, limits, alice):
    alice.user.username = username = _username()
    alice.user.save(update_fields=["username"])
    for _ in range(LIMIT):
        assert _sign_in(client, username, "wrong", _address()).status_code == 200

    # Even the right password waits: the password is not checked while the account is throttled.
    throttled = _sign_in(client, username.upper(), "alice-password-1", _address())

    assert throttled.status_code == 429
    assert "Too many failed sign-ins" in throttled.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_successful_sign_in_is_not_counted(client, limits, alice):
    address = _address()
    for _ in range(LIMIT + 1):
        response = _sign_in(client, "alice", "alice-password-1", address)
        assert response.status_code == 302
        client.logout()


def test_the_offloaded_hasher_reads_and_writes_djangos_pbkdf2_hashes(settings):
    settings.PASSWORD_HASHERS = ["accounts.hashers.OffloadedPBKDF2PasswordHasher"]
    plain = PBKDF2PasswordHasher().encode("secret", "salt1234", iterations=1000)
    assert OffloadedPBKDF2PasswordHasher().encode("secret", "salt1234", iterations=1000) == plain
    assert check_password("secret", plain)
    assert make_password("secret").startswith("pbkdf2_sha256$")


HASH_WHILE_TICKING = """
import json

import gevent

from accounts.hashers import OffloadedPBKDF2PasswordHasher

ticks = [0]


def ticker():
    while True:
        ticks[0] += 1
        gevent.sleep(0.005)


gevent.spawn(ticker)
gevent.sleep(0.02)
before = ticks[0]
OffloadedPBKDF2PasswordHasher().encode("secret", "salt1234", iterations=600_000)
print(json.dumps({"ticks": ticks[0] - before}))
"""


def test_password_hashing_leaves_other_greenlets_running():
    assert gevent_probe_run(HASH_WHILE_TICKING)["ticks"] >= 5


def test_a_sign_in_refused_unchecked_does_not_use_up_its_addresss_budget(client, limits):
    address = _address()
    username = _username()
    for _ in range(LIMIT):
        assert _sign_in(client, username, "wrong", _address()).status_code == 200
    for _ in range(LIMIT + 2):  # refused for the username: no password checked, nothing counted
        assert _sign_in(client, username, "wrong", address).status_code == 429

    assert _sign_in(client, _username(), "wrong", address).status_code == 200


def test_staff_unlock_a_throttled_username_with_signin_unlock(client, limits, alice):
    alice.user.username = username = _username()
    alice.user.save(update_fields=["username"])
    for _ in range(LIMIT):
        assert _sign_in(client, username, "wrong", _address()).status_code == 200
    assert _sign_in(client, username, "alice-password-1", _address()).status_code == 429
    out = io.StringIO()

    call_command("signin_unlock", username.upper(), stdout=out)

    assert f"Gave back {LIMIT} failed sign-in(s)" in out.getvalue()
    assert _sign_in(client, username, "alice-password-1", _address()).status_code == 302


def test_a_sign_in_that_gets_no_turn_in_time_is_429_without_its_password_checked(client, settings, alice):
    settings.GATEWAY_SIGNIN_WAIT_SECONDS = 0
    with ExitStack() as turns:
        while turns.enter_context(signin_turn()):  # take every turn of this process
            pass
        busy = _sign_in(client, "alice", "alice-password-1", _address())

    assert busy.status_code == 429
    assert "Too many sign-ins at once" in busy.content.decode()
    assert "_auth_user_id" not in client.session
    assert _sign_in(client, "alice", "alice-password-1", _address()).status_code == 302
