"""The retry/failover loop and the circuit breaker, driven by an attempt function that plays the
upstream (the adapter boundary) and a fake clock, so backoff is checked without sleeping."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from api.errors import api_error_for
from core.errors import InvalidRequest
from upstreams.circuit import (
    circuit_admit,
    circuit_admit_panic,
    circuit_record_failure,
    circuit_state,
    circuit_stats_flush,
)
from upstreams.errors import (
    UpstreamDeadlineExceeded,
    UpstreamsCircuitOpen,
    UpstreamsFailed,
    UpstreamsOverloaded,
    UpstreamsRateLimited,
)
from upstreams.providers.base import UpstreamError
from upstreams.resilience import RetryPolicy, upstream_call_resilient
from upstreams.services import upstream_upsert

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_cache():
    # Counts buffered by earlier tests' calls go out first, so they cannot land in this test's counters.
    circuit_stats_flush()
    cache.clear()
    yield
    circuit_stats_flush()
    cache.clear()


def make_upstream(name: str, *, priority: int = 0, weight: int = 1, timeout: int = 10):
    upstream, _ = upstream_upsert(
        name=name,
        kind="openai",
        base_url=f"https://{name}.example/v1",
        api_key_env="K",
        timeout_seconds=timeout,
        priority=priority,
        weight=weight,
        enabled=True,
    )
    return upstream


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Script:
    """Plays the upstreams: a list of outcomes per upstream name, consumed in order."""

    def __init__(self, **outcomes) -> None:
        self.outcomes = {name: list(items) for name, items in outcomes.items()}
        self.calls: list[str] = []

    def __call__(self, upstream, deadline):
        self.calls.append(upstream.name)
        outcome = self.outcomes[upstream.name].pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def classify(error, upstream):
    return InvalidRequest(error.message, status=error.status or 400)


def err(status, *, retry_after=None, unknown=False, retryable=True):
    return UpstreamError(
        f"status {status}",
        status=status,
        retryable=retryable,
        retry_after=retry_after,
        outcome_unknown=unknown,
    )


def run(upstreams, script, clock):
    return upstream_call_resilient(
        upstreams=upstreams,
        attempt=script,
        classify=classify,
        clock=clock,
        sleep=clock.sleep,
        request_id="req_t",
    )


def test_it_moves_to_the_next_upstream_before_waiting():
    a, b = make_upstream("a"), make_upstream("b", priority=1)
    clock = Clock()
    script = Script(a=[err(500)], b=["ok"])
    result, used = run([a, b], script, clock)
    assert (result, used.name) == ("ok", "b")
    assert script.calls == ["a", "b"]
    assert clock.sleeps == []


def test_it_backs_off_exponentially_with_jitter_between_rounds():
    a = make_upstream("a")
    clock = Clock()
    script = Script(a=[err(503), err(502), err(500), "ok"])
    result, _ = run([a], script, clock)
    assert result == "ok"
    assert len(clock.sleeps) == 3
    for round_number, slept in enumerate(clock.sleeps):
        assert 0.8 * 2**round_number <= slept <= 1.2 * 2**round_number


def test_it_honours_retry_after_and_never_retries_an_upstream_before_it():
    a = make_upstream("a", timeout=100)
    clock = Clock()
    script = Script(a=[err(429, retry_after=7), err(429, retry_after=40), "ok"])
    with pytest.raises(UpstreamsRateLimited) as info:
        run([a], script, clock)
    assert 7 <= clock.sleeps[0] <= 7.0001
    assert len(clock.sleeps) == 1  # 40 s is beyond the longest wait (30 s): the caller gets it
    assert api_error_for(info.value).headers["Retry-After"] == "40"


def test_it_gives_up_after_five_retries_with_502_naming_the_last_status(settings):
    settings.GATEWAY_RETRY = {**settings.GATEWAY_RETRY, "circuit_threshold": 100}
    a = make_upstream("a", timeout=300)
    clock = Clock()
    script = Script(a=[err(500)] * 5 + [err(502)] + ["never reached"])
    with pytest.raises(UpstreamsFailed) as info:
        run([a], script, clock)
    assert api_error_for(info.value).status == 502
    assert "repeatedly failed" in info.value.message
    assert "last upstream status: 502" in info.value.message
    assert len(script.calls) == 6


def test_it_answers_503_when_every_upstream_said_503():
    a, b = make_upstream("a", timeout=300), make_upstream("b", timeout=300)
    clock = Clock()
    script = Script(a=[err(503)] * 3, b=[err(503)] * 3)
    with pytest.raises(UpstreamsOverloaded) as info:
        run([a, b], script, clock)
    assert api_error_for(info.value).status == 503
    assert "Retry-After" in api_error_for(info.value).headers


def test_it_answers_429_with_retry_after_when_every_upstream_said_429():
    a = make_upstream("a", timeout=300)
    clock = Clock()
    script = Script(a=[err(429, retry_after=2)] * 6)
    with pytest.raises(UpstreamsRateLimited) as info:
        run([a], script, clock)
    assert api_error_for(info.value).headers["Retry-After"] == "2"


def test_it_ends_504_when_the_deadline_runs_out():
    a = make_upstream("a", timeout=1)

    class SlowClock(Clock):
        def __call__(self):
            self.now += 20  # every look at the clock costs 20 s: attempts are slow
            return self.now

    clock = SlowClock()
    script = Script(a=[err(500)] * 6)
    with pytest.raises(UpstreamDeadlineExceeded) as info:
        run([a], script, clock)
    assert api_error_for(info.value).status == 504
    assert len(script.calls) < 6


def test_it_never_retries_after_the_request_was_sent():
    a, b = make_upstream("a"), make_upstream("b")
    clock = Clock()
    script = Script(a=[err(504, unknown=True, retryable=False)], b=["ok"])
    with pytest.raises(InvalidRequest):
        run([a, b], script, clock)
    assert script.calls == ["a"]


def test_a_request_error_is_passed_on_without_retrying():
    a, b = make_upstream("a"), make_upstream("b")
    clock = Clock()
    script = Script(a=[err(400, retryable=False)], b=["ok"])
    with pytest.raises(InvalidRequest) as info:
        run([a, b], script, clock)
    assert info.value.status == 400
    assert script.calls == ["a"]
    assert circuit_state(upstream_id=a.pk).consecutive_failures == 0


def test_an_open_circuit_skips_the_upstream_and_one_probe_closes_it():
    a, b = make_upstream("a"), make_upstream("b", priority=1)
    policy = RetryPolicy.for_upstream(a)
    for _ in range(policy.circuit_threshold):
        circuit_record_failure(upstream_id=a.pk, threshold=policy.circuit_threshold, cooldown=30)
    assert circuit_state(upstream_id=a.pk).state == "open"
    clock = Clock()
    script = Script(a=["from a"], b=["from b"])
    result, used = run([a, b], script, clock)
    assert (result, used.name) == ("from b", "b")
    assert script.calls == ["b"]  # a was skipped without a call
    # After the cooldown the next call probes a; its success closes the circuit.
    cache.set(f"circuit:{a.pk}:open_until", 0, timeout=60)
    assert circuit_state(upstream_id=a.pk).state == "half-open"
    _, used = run([a, b], script, clock)
    assert used.name == "a"
    assert circuit_state(upstream_id=a.pk).state == "closed"


def test_only_one_caller_gets_the_probe_of_a_half_open_circuit():
    a = make_upstream("a")
    for _ in range(5):
        circuit_record_failure(upstream_id=a.pk, threshold=5, cooldown=30)
    assert circuit_admit(upstream_id=a.pk) is None
    cache.set(f"circuit:{a.pk}:open_until", 0, timeout=60)
    assert circuit_admit(upstream_id=a.pk) is not None
    assert circuit_admit(upstream_id=a.pk) is None


def test_every_circuit_open_answers_503_without_any_call_once_the_process_has_probed():
    a = make_upstream("a")
    for _ in range(5):
        circuit_record_failure(upstream_id=a.pk, threshold=5, cooldown=30)
    assert circuit_admit_panic(upstream_id=a.pk, cooldown=30) is not None  # this slot's probe
    script = Script(a=["never"])
    with pytest.raises(UpstreamsCircuitOpen) as info:
        run([a], script, Clock())
    assert api_error_for(info.value).status == 503
    assert script.calls == []


def test_a_failed_probe_opens_the_circuit_again():
    a = make_upstream("a")
    for _ in range(5):
        circuit_record_failure(upstream_id=a.pk, threshold=5, cooldown=30)
    cache.set(f"circuit:{a.pk}:open_until", 0, timeout=60)
    assert circuit_admit(upstream_id=a.pk) is not None
    assert circuit_record_failure(upstream_id=a.pk, threshold=5, cooldown=30) is True
    assert circuit_state(upstream_id=a.pk).state == "open"
    assert circuit_state(upstream_id=a.pk).recent_errors == 6


def test_an_upstreams_own_retry_settings_override_the_defaults():
    a = make_upstream("a", timeout=300)
    a.max_retries = 1
    a.retry_base_seconds = 4.0
    a.save(update_fields=["max_retries", "retry_base_seconds"])
    clock = Clock()
    script = Script(a=[err(500)] * 5)
    with pytest.raises(UpstreamsFailed):
        run([a], script, clock)
    assert len(script.calls) == 2  # the first attempt and its one retry
    assert 3.2 <= clock.sleeps[0] <= 4.8


# --- one caller cannot open the circuit for everyone -------------------------------------------------


def test_a_calls_retries_count_as_one_failure_of_the_upstream():
    a = make_upstream("a", timeout=300)
    clock = Clock()
    script = Script(a=[err(500)] * 6)
    with pytest.raises(UpstreamsFailed):
        run([a], script, clock)
    assert len(script.calls) == 6
    state = circuit_state(upstream_id=a.pk)
    assert (state.state, state.consecutive_failures) == ("closed", 1)


def test_the_threshold_counts_distinct_calls():
    a = make_upstream("a", timeout=300)
    for _ in range(5):
        with pytest.raises(UpstreamsFailed):
            run([a], Script(a=[err(500)] * 6), Clock())
    assert circuit_state(upstream_id=a.pk).state == "open"


def test_when_every_circuit_is_open_one_probe_per_process_still_goes_through():
    a = make_upstream("a")
    for _ in range(5):
        circuit_record_failure(upstream_id=a.pk, threshold=5, cooldown=30)
    result, used = run([a], Script(a=["ok"]), Clock())
    assert (result, used.name) == ("ok", "a")
    assert circuit_state(upstream_id=a.pk).state == "closed"


def test_a_failed_panic_probe_leaves_the_next_calls_of_the_slot_refused():
    a = make_upstream("a")
    for _ in range(5):
        circuit_record_failure(upstream_id=a.pk, threshold=5, cooldown=30)
    clock = Clock()
    script = Script(a=[err(500), "never"])
    with pytest.raises(UpstreamsFailed):
        run([a], script, clock)
    assert script.calls == ["a"]
    assert clock.sleeps == []  # the circuit refuses every further attempt: no wait for one
    with pytest.raises(UpstreamsCircuitOpen) as info:
        run([a], script, clock)
    assert (api_error_for(info.value).status, info.value.code) == (503, "upstreams_unavailable")
    assert script.calls == ["a"]


def test_a_redis_outage_falls_back_to_process_memory_and_is_logged_once(settings, caplog):
    a = make_upstream("a", timeout=300)
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
        }
    }
    with caplog.at_level("WARNING"):
        assert run([a], Script(a=["ok"]), Clock())[0] == "ok"
        with pytest.raises(UpstreamsFailed):
            run([a], Script(a=[err(500)] * 6), Clock())
        assert run([a], Script(a=[err(503), "ok"]), Clock())[0] == "ok"
    outage = [r for r in caplog.records if "degraded" in r.getMessage() and "Redis" in r.getMessage()]
    assert len(outage) == 1


# --- the spec's retry limits -----------------------------------------------------------------------


def test_the_whole_call_ends_within_the_retry_deadline_whatever_the_upstream_timeout():
    a = make_upstream("a", timeout=120)
    clock = Clock()
    start = clock.now
    deadlines: list[float] = []

    def slow_failure(upstream, deadline):
        deadlines.append(deadline)
        clock.now = min(clock.now + 25, deadline)  # each attempt takes 25 s (or its read timeout)
        raise err(500)

    with pytest.raises(UpstreamDeadlineExceeded) as info:
        upstream_call_resilient(
            upstreams=[a],
            attempt=slow_failure,
            classify=classify,
            clock=clock,
            sleep=clock.sleep,
        )
    assert deadlines[0] == start + 60
    assert clock.now - start <= 60
    assert api_error_for(info.value).status == 504


def test_it_never_waits_for_an_attempt_the_circuit_will_refuse():
    a = make_upstream("a", timeout=300)
    for _ in range(4):  # other calls' failures
        circuit_record_failure(upstream_id=a.pk, threshold=5, cooldown=30)
    clock = Clock()
    script = Script(a=[err(500), "never"])
    with pytest.raises(UpstreamsFailed):
        run([a], script, clock)
    assert circuit_state(upstream_id=a.pk).state == "open"
    assert clock.sleeps == []
    assert script.calls == ["a"]


def test_an_upstream_429_does_not_count_toward_its_circuit():
    a = make_upstream("a", timeout=300)
    for _ in range(3):
        with pytest.raises(UpstreamsRateLimited):
            run([a], Script(a=[err(429, retry_after=1)] * 6), Clock())
    state = circuit_state(upstream_id=a.pk)
    assert (state.state, state.consecutive_failures) == ("closed", 0)


def test_a_429_moves_on_to_another_upstream_at_once():
    a, b = make_upstream("a"), make_upstream("b", priority=1)
    clock = Clock()
    result, used = run([a, b], Script(a=[err(429, retry_after=20)], b=["ok"]), clock)
    assert (result, used.name) == ("ok", "b")
    assert clock.sleeps == []


def test_a_retry_after_beyond_the_deadline_ends_the_call_with_429_without_waiting():
    a = make_upstream("a", timeout=300)
    clock = Clock()
    script = Script(a=[err(429, retry_after=3600), "never"])
    with pytest.raises(UpstreamsRateLimited) as info:
        run([a], script, clock)
    assert clock.sleeps == []
    assert script.calls == ["a"]
    assert api_error_for(info.value).headers["Retry-After"] == "3600"
