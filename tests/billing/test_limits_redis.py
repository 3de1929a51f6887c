"""With Redis, every gateway process counts against one limit (real separate processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from api.errors import api_error_for
from billing.errors import RateLimitExceeded
from billing.limits import RATE_GROUP, RATE_PERIOD_SECONDS, rate_limit_hit
from tests.rate_windows import window_key_fresh

pytestmark = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis: set REDIS_URL")

ROOT = Path(settings.BASE_DIR)

# One "gateway process": configures Django from the same environment (same REDIS_URL) and makes
# `attempts` calls through the rate-limit service for the credential.
GATEWAY_PROCESS = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings_test")
import django
django.setup()
from django.conf import settings
from billing.limits import rate_limit_hit
from billing.errors import RateLimitExceeded
limit_key, rpm, attempts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
allowed = refused = 0
for _ in range(attempts):
    try:
        rate_limit_hit(limit_key=limit_key, rpm=rpm)
        allowed += 1
    except RateLimitExceeded:
        refused += 1
print(json.dumps({"allowed": allowed, "refused": refused, "cache": settings.CACHES["default"]["BACKEND"]}))
"""


def fresh_limit_key() -> str:
    """A credential whose current minute window has at least 20 s left, so the test cannot straddle
    two windows."""
    return window_key_fresh(
        group=RATE_GROUP,
        period=RATE_PERIOD_SECONDS,
        candidate=lambda: f"api_key:redis-test-{uuid.uuid4().hex}",
    )


def test_two_gateway_processes_share_one_rate_limit():
    rpm, attempts = 8, 6
    limit_key = fresh_limit_key()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings_test"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", GATEWAY_PROCESS, limit_key, str(rpm), str(attempts)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert {r["cache"] for r in results} == {"django.core.cache.backends.redis.RedisCache"}
    assert sum(r["allowed"] for r in results) == rpm
    assert sum(r["refused"] for r in results) == 2 * attempts - rpm
    # This (third) process sees the same count: the next call is over the limit, with Retry-After.
    with pytest.raises(RateLimitExceeded) as refused:
        rate_limit_hit(limit_key=limit_key, rpm=rpm)
    assert 1 <= int(api_error_for(refused.value).headers["Retry-After"]) <= RATE_PERIOD_SECONDS
