"""A key's own `rpm`: requests per minute of that key, counted apart from its group's rpm (which stays
per credential); the stricter refuses with 429 `rate_limit_exceeded` and Retry-After, before anything
is reserved; a change applies from the next call."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import override_settings

from api.errors import api_error_for
from api.metering import request_rate_limits_hit
from billing.errors import LimitsUnavailable, RateLimitExceeded
from billing.limits import KEY_RATE_GROUP
from billing.models import Hold, LedgerEntry, UsageRecord
from groups.models import Group
from groups.snapshots import GroupSnapshot
from keys.credentials import Credential, KeyLimits
from keys.services import ApiKeyLimitsInput, api_key_create, api_key_limits_set
from tests.billing.conftest import credential_for
from tests.process_state import redis_health_fresh
from tests.rate_windows import local_rate_window_wait, rate_window_wait
from tests.redis_process import redis_process

pytestmark = pytest.mark.django_db

GENERATIONS = "/v1/images/generations"


def key_credential(account, group, *, rpm: int | None) -> Credential:
    base = credential_for(account, group)
    return Credential(
        kind="api_key", id=base.id, account=account, bound_group=group, limits=KeyLimits(rpm=rpm)
    )


def windows_wait(credential: Credential) -> None:
    """Both counters' windows have room for the test's calls."""
    rate_window_wait(credential.limit_key)
    rate_window_wait(f"api_key:{credential.id}", group=KEY_RATE_GROUP)


def group_with_rpm(group, rpm: int) -> GroupSnapshot:
    Group.objects.filter(pk=group.pk).update(rpm=rpm)
    return GroupSnapshot.from_model(Group.objects.get(pk=group.pk))


def test_the_keys_own_rpm_refuses_the_call_over_it_with_retry_after(alice, alpha_group):
    group = group_with_rpm(alpha_group, 0)
    credential = key_credential(alice, group, rpm=2)
    windows_wait(credential)
    for _ in range(2):
        request_rate_limits_hit(credential=credential, group=group)

    with pytest.raises(RateLimitExceeded) as refused:
        request_rate_limits_hit(credential=credential, group=group)

    error = api_error_for(refused.value)
    assert (error.status, error.type, error.code) == (429, "rate_limit_error", "rate_limit_exceeded")
    assert 1 <= int(error.headers["Retry-After"]) <= 60
    assert "this API key's own limit is 2 requests per minute" in error.message


def test_the_stricter_of_the_groups_and_the_keys_rpm_refuses(alice, alpha_group):
    group = group_with_rpm(alpha_group, 3)
    loose = key_credential(alice, group, rpm=10)
    windows_wait(loose)
    for _ in range(3):
        request_rate_limits_hit(credential=loose, group=group)
    with pytest.raises(RateLimitExceeded) as refused:
        request_rate_limits_hit(credential=loose, group=group)
    assert "this key may make 3 requests per minute" in refused.value.message

    strict = key_credential(alice, group, rpm=1)
    windows_wait(strict)
    request_rate_limits_hit(credential=strict, group=group)
    with pytest.raises(RateLimitExceeded) as refused:
        request_rate_limits_hit(credential=strict, group=group)
    assert "own limit is 1 requests per minute" in refused.value.message


def test_the_keys_counter_is_its_own_not_the_groups(alice, alpha_group):
    """The group's count of a credential does not use up the key's own rpm, nor the other way round:
    two counters, each counting the same calls against its own limit."""
    unlimited_group = group_with_rpm(alpha_group, 0)
    credential = key_credential(alice, unlimited_group, rpm=2)
    windows_wait(credential)
    limited_group = group_with_rpm(alpha_group, 5)
    # Two calls count in the group's window only, while the key has no rpm of its own...
    no_rpm = Credential(
        kind="api_key", id=credential.id, account=alice, bound_group=limited_group, limits=KeyLimits()
    )
    for _ in range(2):
        request_rate_limits_hit(credential=no_rpm, group=limited_group)
    # ...so the key's own two are all still there.
    for _ in range(2):
        request_rate_limits_hit(credential=credential, group=unlimited_group)
    with pytest.raises(RateLimitExceeded):
        request_rate_limits_hit(credential=credential, group=unlimited_group)


def test_a_check_without_counting_refuses_only_a_full_minute_and_counts_nothing(alice, alpha_group):
    group = group_with_rpm(alpha_group, 3)
    credential = key_credential(alice, group, rpm=2)
    windows_wait(credential)
    for _ in range(5):
        request_rate_limits_hit(credential=credential, group=group, count=False)
    request_rate_limits_hit(credential=credential, group=group)
    request_rate_limits_hit(credential=credential, group=group, count=False)
    request_rate_limits_hit(credential=credential, group=group)  # the key's second: none was counted

    with pytest.raises(RateLimitExceeded) as refused:
        request_rate_limits_hit(credential=credential, group=group, count=False)
    assert "own limit is 2 requests per minute" in refused.value.message
    assert 1 <= int(api_error_for(refused.value).headers["Retry-After"]) <= 60

    # The group's minute: two counted of its three, so one more fits; after it, none.
    loose = Credential(kind="api_key", id=credential.id, account=alice, bound_group=group, limits=KeyLimits())
    request_rate_limits_hit(credential=loose, group=group, count=False)
    request_rate_limits_hit(credential=loose, group=group)
    with pytest.raises(RateLimitExceeded) as refused:
        request_rate_limits_hit(credential=loose, group=group, count=False)
    assert "this key may make 3 requests per minute" in refused.value.message


def test_oauth_tokens_and_the_console_carry_no_key_rpm(alice, alpha_group):
    group = group_with_rpm(alpha_group, 0)
    for kind in ("oauth", "console"):
        credential = Credential(kind=kind, id=77, account=alice, bound_group=group)
        for _ in range(50):
            request_rate_limits_hit(credential=credential, group=group)


@pytest.mark.django_db(transaction=True)
def test_over_the_keys_rpm_an_image_call_is_refused_before_reserving_and_a_change_applies_next_call(
    client, alice, alpha_group, alpha_model
):
    cache.clear()  # key ids repeat from test to test: no earlier test's count may remain
    api_key, key = api_key_create(
        account=alice, group=alpha_group, label="agent", limits=ApiKeyLimitsInput(rpm=1)
    )
    rate_window_wait(f"api_key:{api_key.pk}", group=KEY_RATE_GROUP, seconds=10)
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "alpha-image-2", "prompt": "a red square"}

    first = client.post(GENERATIONS, body, content_type="application/json", headers=headers)
    refused = client.post(
        GENERATIONS, body, content_type="application/json", headers={**headers, "X-Request-Id": "req-over"}
    )

    assert first.status_code == 200, first.content
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert Hold.objects.count() == 1  # the first call's, captured; none for the refused one
    assert LedgerEntry.objects.filter(kind="charge").count() == 1
    assert UsageRecord.objects.get(request_id="req-over").status == 429

    api_key_limits_set(api_key=api_key, limits=ApiKeyLimitsInput(rpm=5))

    again = client.post(GENERATIONS, body, content_type="application/json", headers=headers)
    assert again.status_code == 200, again.content
    assert LedgerEntry.objects.filter(kind="charge").count() == 2


@pytest.fixture
def redis_down(monkeypatch):
    """A Redis of the test's own, stopped: every limit meets the outage."""
    with redis_process() as server, override_settings(REDIS_URL=server.url, CACHES=server.caches()):
        redis_health_fresh(monkeypatch)
        server.stop()
        yield server


def test_while_redis_is_down_the_keys_rpm_counts_per_process_or_refuses_503_when_closed(
    alice, alpha_group, redis_down, settings
):
    group = GroupSnapshot.from_model(Group.objects.get(pk=alpha_group.pk))
    credential = key_credential(alice, group, rpm=2)
    local_rate_window_wait()
    request_rate_limits_hit(credential=credential, group=group, count=False)  # counts nothing
    for _ in range(2):
        request_rate_limits_hit(credential=credential, group=group)
    with pytest.raises(RateLimitExceeded):
        request_rate_limits_hit(credential=credential, group=group, count=False)
    with pytest.raises(RateLimitExceeded):
        request_rate_limits_hit(credential=credential, group=group)

    settings.GATEWAY_REDIS_FAILURE_MODE = "closed"
    with pytest.raises(LimitsUnavailable) as refused:
        request_rate_limits_hit(credential=key_credential(alice, group, rpm=2), group=group)
    assert api_error_for(refused.value).status == 503
