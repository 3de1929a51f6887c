"""The circuit breaker's cost: Redis commands per call, counted by the Redis server itself (MONITOR),
plus the semantics that the cheaper success path keeps (tests/upstreams/test_resilience.py has the rest)."""

from __future__ import annotations

import json
import time

import pytest
from django.conf import settings
from django.core.cache import cache

from core import config_watch
from core.config_cache import config_generation, config_generation_bump
from keys.services import api_key_create
from tests.circuit_counts import counted
from tests.redis_commands import redis_commands
from tests.request_signals import serving_a_request
from upstreams import circuit
from upstreams.circuit import (
    CLEAN_VIEW_SECONDS,
    circuit_admit,
    circuit_record_failure,
    circuit_record_success,
    circuit_state,
    circuit_stats_flush,
)

pytestmark = pytest.mark.django_db

needs_redis = pytest.mark.skipif(
    not settings.REDIS_URL,
    reason="counts commands on the Redis server (MONITOR); without REDIS_URL the circuit lives in a "
    "per-process memory cache with no round trips to count",
)


@pytest.fixture(autouse=True)
def clean_cache():
    # Counts buffered by earlier tests' calls go out first, so they cannot land in this test's counters.
    circuit_stats_flush()
    cache.clear()
    yield
    circuit_stats_flush()
    cache.clear()


def watched() -> None:
    """This process's configuration watch armed (a request's first use of the configuration arms it)."""
    config_generation()
    config_generation()
    assert config_watch._watch.armed


@pytest.fixture
def unwatched():
    """No configuration watch, as with a Redis that refuses CLIENT TRACKING: views expire instead."""
    config_watch._watch.close()
    yield
    config_watch._watch.close()


@needs_redis
def test_a_success_on_a_closed_circuit_costs_one_redis_round_trip(demo_upstream):
    circuit_stats_flush()  # the next flush is due only STATS_FLUSH_SECONDS from now

    with redis_commands() as redis_seen:
        admission = circuit_admit(upstream_id=demo_upstream.pk)
        circuit_record_success(upstream_id=demo_upstream.pk, admission=admission)

    assert admission is not None and admission.clean
    assert len(redis_seen.circuit()) == 1
    assert redis_seen.circuit()[0].startswith("MGET")
    assert circuit_state(upstream_id=demo_upstream.pk).recent_calls == 1


@needs_redis
def test_an_api_call_touches_the_circuit_once(client, alice, alpha_group, alpha_model):
    key = api_key_create(account=alice, group=alpha_group)[1]
    circuit_stats_flush()
    watched()

    with redis_commands() as redis_seen:
        response = client.post(
            "/v1/images/generations",
            data=json.dumps({"model": "alpha-image-2", "prompt": "a red square", "size": "64x64"}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )

    assert response.status_code == 200
    assert [command.split()[0] for command in redis_seen.circuit()] == ["MGET"]
    assert circuit_state(upstream_id=alpha_model.upstreams.get().pk).state == "closed"


@needs_redis
def test_a_success_after_failures_resets_them_with_one_more_round_trip(demo_upstream):
    circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)
    circuit_stats_flush()

    with redis_commands() as redis_seen:
        admission = circuit_admit(upstream_id=demo_upstream.pk)
        circuit_record_success(upstream_id=demo_upstream.pk, admission=admission)

    assert [command.split()[0] for command in redis_seen.circuit()] == ["MGET", "DEL"]
    assert circuit_state(upstream_id=demo_upstream.pk).consecutive_failures == 0


def test_it_resets_the_failures_its_admission_saw(demo_upstream):
    for _ in range(2):
        circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)
    admission = circuit_admit(upstream_id=demo_upstream.pk)

    circuit_record_success(upstream_id=demo_upstream.pk, admission=admission)

    assert admission is not None and not admission.clean
    assert circuit_state(upstream_id=demo_upstream.pk).consecutive_failures == 0


def test_a_failure_counted_while_a_clean_call_was_in_flight_is_reset_by_the_next_success(demo_upstream):
    in_flight = circuit_admit(upstream_id=demo_upstream.pk)
    circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)  # another call

    circuit_record_success(upstream_id=demo_upstream.pk, admission=in_flight)
    assert circuit_state(upstream_id=demo_upstream.pk).consecutive_failures == 1

    later = circuit_admit(upstream_id=demo_upstream.pk)
    circuit_record_success(upstream_id=demo_upstream.pk, admission=later)
    assert circuit_state(upstream_id=demo_upstream.pk).consecutive_failures == 0


def test_the_threshold_opens_the_circuit_and_the_probes_success_closes_it(demo_upstream):
    for _ in range(4):
        assert not circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)
    assert circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)
    assert circuit_admit(upstream_id=demo_upstream.pk) is None

    later = circuit_state(upstream_id=demo_upstream.pk).open_until + 1
    probe = circuit_admit(upstream_id=demo_upstream.pk, now=later)
    assert probe is not None and not probe.clean
    assert circuit_admit(upstream_id=demo_upstream.pk, now=later) is None  # one probe at a time

    circuit_record_success(upstream_id=demo_upstream.pk, admission=probe)
    state = circuit_state(upstream_id=demo_upstream.pk)
    assert (state.state, state.consecutive_failures) == ("closed", 0)
    assert (state.recent_calls, state.recent_errors) == (6, 5)


def test_an_admission_is_for_its_own_upstream_only(demo_upstream):
    admission = circuit_admit(upstream_id=demo_upstream.pk)

    with pytest.raises(ValueError, match="admission of upstream"):
        circuit_record_success(upstream_id=demo_upstream.pk + 1, admission=admission)


def test_call_counts_reach_the_shared_counters_when_flushed(demo_upstream):
    circuit_stats_flush()
    first_minute = int(time.time() // 60)
    for _ in range(3):
        circuit_record_success(
            upstream_id=demo_upstream.pk, admission=circuit_admit(upstream_id=demo_upstream.pk)
        )
    circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)
    minutes = range(first_minute, int(time.time() // 60) + 1)
    assert counted(demo_upstream.pk, minutes) == (0, 0)  # buffered in this process: no round trip a call

    circuit_stats_flush()

    assert counted(demo_upstream.pk, minutes) == (4, 1)


def test_inside_a_request_due_counts_are_written_once_it_has_answered_not_on_the_calls_way(
    demo_upstream, monkeypatch
):
    # Writing them is two Redis round trips a counter: before the answer, or a stream's first event.
    monkeypatch.setattr(circuit, "STATS_FLUSH_SECONDS", 0.0)  # every count finds a write due
    first_minute = int(time.time() // 60)
    with serving_a_request():
        circuit_record_success(
            upstream_id=demo_upstream.pk, admission=circuit_admit(upstream_id=demo_upstream.pk)
        )
        circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)
        minutes = range(first_minute, int(time.time() // 60) + 1)
        assert counted(demo_upstream.pk, minutes) == (0, 0)

    assert counted(demo_upstream.pk, minutes) == (2, 1)


def test_outside_a_request_the_count_that_finds_them_due_writes_them(demo_upstream, monkeypatch):
    monkeypatch.setattr(circuit, "STATS_FLUSH_SECONDS", 0.0)
    first_minute = int(time.time() // 60)

    circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)

    assert counted(demo_upstream.pk, range(first_minute, int(time.time() // 60) + 1)) == (1, 1)


@needs_redis
def test_a_clean_view_costs_no_round_trip_while_redis_reports_no_change(demo_upstream):
    watched()
    assert circuit_admit(upstream_id=demo_upstream.pk).clean
    time.sleep(CLEAN_VIEW_SECONDS + 0.05)  # older than a view may be without the watch

    with redis_commands() as redis_seen:
        again = circuit_admit(upstream_id=demo_upstream.pk)

    assert again is not None and again.clean
    assert redis_seen.circuit() == []


@needs_redis
def test_a_circuit_opened_by_another_process_is_seen_at_the_next_admission(demo_upstream):
    watched()
    assert circuit_admit(upstream_id=demo_upstream.pk).clean
    cache.set(f"circuit:{demo_upstream.pk}:open_until", time.time() + 30, timeout=60)  # elsewhere

    assert circuit_admit(upstream_id=demo_upstream.pk) is None


@needs_redis
def test_a_failure_counted_by_another_process_ends_the_view_at_once(demo_upstream):
    watched()
    assert circuit_admit(upstream_id=demo_upstream.pk).clean
    cache.set(f"circuit:{demo_upstream.pk}:failures", 1, timeout=None)  # elsewhere

    with redis_commands() as redis_seen:
        admission = circuit_admit(upstream_id=demo_upstream.pk)

    assert admission is not None and not admission.clean
    assert [command.split()[0] for command in redis_seen.circuit()] == ["MGET"]


@needs_redis
def test_other_upstreams_and_the_call_counts_leave_a_view_alone(demo_upstream):
    watched()
    assert circuit_admit(upstream_id=demo_upstream.pk).clean
    minute = int(time.time() // 60)
    cache.incr(f"circuit:{demo_upstream.pk}:calls:{minute}") if cache.get(
        f"circuit:{demo_upstream.pk}:calls:{minute}"
    ) else cache.set(f"circuit:{demo_upstream.pk}:calls:{minute}", 5)  # another process's flush
    cache.set(f"circuit:{demo_upstream.pk + 1000}:open_until", time.time() + 30, timeout=60)

    with redis_commands() as redis_seen:
        again = circuit_admit(upstream_id=demo_upstream.pk)

    assert again is not None and again.clean
    assert redis_seen.circuit() == []


@needs_redis
def test_without_the_watch_a_clean_view_expires_after_clean_view_seconds(demo_upstream, unwatched):
    first = circuit_admit(upstream_id=demo_upstream.pk)
    assert first is not None and first.clean

    with redis_commands() as redis_seen:
        again = circuit_admit(upstream_id=demo_upstream.pk)

    assert again is not None and again.clean
    assert redis_seen.circuit() == []
    # Another process opens the circuit: this one sees it once its clean view is older than allowed.
    cache.set(f"circuit:{demo_upstream.pk}:open_until", time.time() + 30, timeout=60)
    assert circuit_admit(upstream_id=demo_upstream.pk) is not None
    time.sleep(CLEAN_VIEW_SECONDS)
    assert circuit_admit(upstream_id=demo_upstream.pk) is None


@needs_redis
def test_a_failure_here_ends_the_clean_view_at_once(demo_upstream):
    assert circuit_admit(upstream_id=demo_upstream.pk).clean
    circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)

    with redis_commands() as redis_seen:
        admission = circuit_admit(upstream_id=demo_upstream.pk)

    assert admission is not None and not admission.clean  # the failure is counted, so it is read
    assert [command.split()[0] for command in redis_seen.circuit()] == ["MGET"]


def test_a_configuration_change_ends_the_clean_views(demo_upstream, unwatched):
    assert circuit_admit(upstream_id=demo_upstream.pk).clean
    cache.set(f"circuit:{demo_upstream.pk}:open_until", time.time() + 30, timeout=60)
    assert circuit_admit(upstream_id=demo_upstream.pk) is not None  # still the clean view

    config_generation_bump()

    assert circuit_admit(upstream_id=demo_upstream.pk) is None
