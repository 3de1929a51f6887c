"""Tokens per minute (billing/token_limits.py): a call is admitted by its token ceiling against the
group's tpm (per credential) and the key's own, corrected at capture, given back on failure; in
Redis, in this process's own windows without it, and while it is down as the outage policy says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings

from api.errors import api_error_for
from billing.errors import LimitsUnavailable, RateLimitExceeded
from billing.token_limits import (
    TPM_KEY_PREFIX,
    token_window_give_back,
    token_window_settle,
    token_window_take,
)
from tests.process_state import redis_health_fresh
from tests.redis_process import redis_process

LOCMEM = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "igw-test"}}
# A moment 10 s into a minute a few minutes ahead of the test's start (so no window the test makes
# has ended, nor expired from its store, while it runs): the window it is in ends 50 s later. Set
# for each test by `clock`: taken once at import, it would lie in the past by the time a long suite
# reaches these tests, and this process's windows expire by the real clock.
MINUTE_START = 0
NOW = 0


@pytest.fixture(autouse=True)
def clock():
    global MINUTE_START, NOW
    MINUTE_START = (int(time.time()) // 60 + 5) * 60
    NOW = MINUTE_START + 10


@pytest.fixture
def own_redis(monkeypatch):
    with redis_process() as server, override_settings(REDIS_URL=server.url, CACHES=server.caches()):
        redis_health_fresh(monkeypatch)  # reachable, whatever the previous Redis did
        yield server


@pytest.fixture(params=["redis", "this_process", "this_process_while_redis_is_down"])
def where(request):
    """Each store the windows can be in: Redis, this process's (no REDIS_URL), and this process's
    while Redis is down and the failure mode is open (the default)."""
    with ExitStack() as stack:
        if request.param == "this_process":
            stack.enter_context(override_settings(REDIS_URL="", CACHES=LOCMEM))
        else:
            server = request.getfixturevalue("own_redis")
            if request.param == "this_process_while_redis_is_down":
                server.stop()
        yield request.param


def limit_key() -> str:
    return f"api_key:tpm-{uuid.uuid4().hex}"


def take(key: str, tokens: int, *, group_tpm: int = 0, api_key_id=None, key_tpm=None, now=None, count=True):
    return token_window_take(
        limit_key=key,
        group_tpm=group_tpm,
        api_key_id=api_key_id,
        key_tpm=key_tpm,
        tokens=tokens,
        now=NOW if now is None else now,
        count=count,
    )


def test_it_admits_ceilings_while_they_fit_and_refuses_the_next_with_retry_after(where):
    key = limit_key()
    first = take(key, 400, group_tpm=1000)
    second = take(key, 400, group_tpm=1000)

    with pytest.raises(RateLimitExceeded) as refused:
        take(key, 400, group_tpm=1000)

    assert first.local is second.local is (where != "redis")
    error = api_error_for(refused.value)
    assert (error.status, error.code) == (429, "rate_limit_exceeded")
    assert error.headers["Retry-After"] == "50"  # to the end of the minute
    assert "1000 tokens (input + output) per minute" in error.message
    # The refused call added nothing: 200 still fit, and then nothing more does.
    assert take(key, 200, group_tpm=1000) is not None
    with pytest.raises(RateLimitExceeded):
        take(key, 1, group_tpm=1000)


def test_the_correction_at_capture_lets_the_next_call_in(where):
    key = limit_key()
    admitted = take(key, 900, group_tpm=1000)
    with pytest.raises(RateLimitExceeded):
        take(key, 900, group_tpm=1000)

    token_window_settle(take=admitted, used=100)  # the call used 100 of its 900

    assert take(key, 900, group_tpm=1000) is not None
    with pytest.raises(RateLimitExceeded):
        take(key, 1, group_tpm=1000)


def test_a_failed_call_gives_all_of_its_ceiling_back(where):
    key = limit_key()
    admitted = take(key, 1000, group_tpm=1000)

    token_window_give_back(take=admitted)

    assert take(key, 1000, group_tpm=1000) is not None


def test_a_call_without_reported_usage_keeps_its_whole_ceiling(where):
    key = limit_key()
    admitted = take(key, 600, group_tpm=1000)

    token_window_settle(take=admitted, used=None)

    with pytest.raises(RateLimitExceeded):
        take(key, 600, group_tpm=1000)


def test_the_group_and_the_key_count_apart_and_a_refusal_adds_to_neither(where):
    key = limit_key()
    assert take(key, 300, group_tpm=1000, api_key_id=7, key_tpm=500) is not None

    # The key's own 500 refuses; the group's window is not charged for the refused call...
    with pytest.raises(RateLimitExceeded) as refused:
        take(key, 300, group_tpm=1000, api_key_id=7, key_tpm=500)
    assert "this API key's own limit allows 500 tokens" in refused.value.message
    # ...so the group's window has 700 left: a call the key's limit does not cover fits it exactly.
    assert take(key, 700, group_tpm=1000) is not None
    with pytest.raises(RateLimitExceeded) as refused:
        take(key, 1, group_tpm=1000)
    assert "the group allows this key 1000 tokens" in refused.value.message


def test_a_check_without_counting_refuses_only_a_window_without_room_and_adds_nothing(where):
    key, api_key_id = limit_key(), uuid.uuid4().int % 10**9
    limits = {"group_tpm": 1000, "api_key_id": api_key_id, "key_tpm": 800}
    assert take(key, 600, **limits) is not None
    for _ in range(3):
        assert take(key, 200, **limits, count=False) is None

    with pytest.raises(RateLimitExceeded) as refused:
        take(key, 201, **limits, count=False)

    assert "this API key's own limit allows 800 tokens" in refused.value.message
    assert api_error_for(refused.value).headers["Retry-After"] == "50"
    # The checks added nothing: the 200 they let pass still fit, once.
    assert take(key, 200, **limits) is not None
    with pytest.raises(RateLimitExceeded):
        take(key, 1, **limits, count=False)


def test_a_new_minute_starts_an_empty_window(where):
    key = limit_key()
    take(key, 1000, group_tpm=1000)

    assert take(key, 1000, group_tpm=1000, now=MINUTE_START + 60) is not None


def test_a_ceiling_above_the_whole_limit_is_refused_saying_so(where):
    with pytest.raises(RateLimitExceeded) as refused:
        take(limit_key(), 1500, api_key_id=8, key_tpm=1000)

    assert "up to 1500 tokens" in refused.value.message
    assert "set a lower output limit" in refused.value.message


def test_no_limit_counts_nothing():
    assert take(limit_key(), 10**9) is None
    assert take(limit_key(), 10**9, api_key_id=9, key_tpm=None) is None
    token_window_settle(take=None, used=5)  # nothing to correct


def test_the_redis_windows_are_atomic_counters_that_expire_with_their_minute(own_redis):
    key = limit_key()
    admitted = take(key, 250, group_tpm=1000, api_key_id=11, key_tpm=2000)
    direct = redis.Redis.from_url(own_redis.url)

    group_window = cache.make_key(f"{TPM_KEY_PREFIX}:credential:{key}:{MINUTE_START}")
    key_window = cache.make_key(f"{TPM_KEY_PREFIX}:key:11:{MINUTE_START}")
    assert set(admitted.keys) == {group_window, key_window}
    assert [direct.get(name) for name in (group_window, key_window)] == [b"250", b"250"]
    assert 0 < direct.pttl(group_window) <= 51_000

    token_window_settle(take=admitted, used=40)
    assert [direct.get(name) for name in (group_window, key_window)] == [b"40", b"40"]

    # A window that has expired is not made again by a late correction.
    direct.delete(group_window)
    token_window_give_back(take=admitted)
    assert direct.get(group_window) is None and direct.get(key_window) == b"0"


def test_while_redis_is_down_and_failing_closed_a_call_is_refused_with_503(own_redis, settings):
    settings.GATEWAY_REDIS_FAILURE_MODE = "closed"
    own_redis.stop()

    with pytest.raises(LimitsUnavailable) as refused:
        take(limit_key(), 10, group_tpm=1000)

    error = api_error_for(refused.value)
    assert (error.status, error.code) == (503, "limits_unavailable")
    assert int(error.headers["Retry-After"]) >= 1


def test_giving_back_never_raises_while_redis_is_down(own_redis):
    admitted = take(limit_key(), 10, group_tpm=1000)
    own_redis.stop()

    token_window_settle(take=admitted, used=1)
    token_window_give_back(take=admitted)


# One "gateway process": its own Django on the same Redis, trying `attempts` calls of `tokens` each.
GATEWAY_PROCESS = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings_test")
import django
django.setup()
from billing.errors import RateLimitExceeded
from billing.token_limits import token_window_take
limit_key, now = sys.argv[1], float(sys.argv[5])
tpm, tokens, attempts = (int(value) for value in sys.argv[2:5])
admitted = refused = 0
for _ in range(attempts):
    try:
        token_window_take(
            limit_key=limit_key, group_tpm=tpm, api_key_id=None, key_tpm=None, tokens=tokens, now=now
        )
        admitted += 1
    except RateLimitExceeded:
        refused += 1
print(json.dumps({"admitted": admitted, "refused": refused}))
"""


def test_processes_sharing_redis_admit_only_the_ceilings_that_fit_between_them(own_redis):
    key, tpm, tokens, attempts = limit_key(), 10_000, 900, 8
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test",
        "REDIS_URL": own_redis.url,
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", GATEWAY_PROCESS, key, str(tpm), str(tokens), str(attempts), str(NOW)],
            cwd=Path(settings.BASE_DIR),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))

    assert sum(r["admitted"] for r in results) == tpm // tokens  # 11 of the 24
    assert sum(r["refused"] for r in results) == 3 * attempts - tpm // tokens
    with pytest.raises(RateLimitExceeded):  # this process sees the same window
        take(key, tokens, group_tpm=tpm)
