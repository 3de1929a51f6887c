"""Retries with backoff, failover across upstreams, circuit breaking and a deadline for one call.

The rules (spec, "Recommended retry behaviour"; docs/images.md, "Routing and upstream resilience"):
- Upstreams are tried in `upstreams_for_model` order (priority, then weight). A retryable failure
  (connection refused or reset before the request went out, 429, 500, 502, 503, 504, and Anthropic's
  529 "overloaded") moves on to the next upstream at once; only when every upstream has been tried
  in a round does the call wait
  (1 s x 2^round, +-20 % jitter, at least the largest Retry-After seen, at most 30 s) and start
  another round. At most 5 retries in all, and the whole call, attempts and waits, ends by its
  deadline (GATEWAY_RETRY_DEADLINE_SECONDS from its start; each attempt gets what is left).
- No wait is started for an attempt that will not be made: before waiting, some upstream must be
  admissible when the wait ends (circuit closed or due for its probe, Retry-After passed).
- A 429 is not a failure of the upstream: not counted by its circuit, the upstream not called again
  before its Retry-After within the call.
- A misconfigured upstream (its key variable unset) is never retried, waited for or counted; another
  upstream is tried at once, and with none left the caller gets 502 upstream_misconfigured.
- A failure after the request was sent (read timeout, connection dropped mid-answer) is never
  retried: the provider may have made, and billed, the image. The call ends 504 or 502 and is logged
  as "outcome unknown".
- Upstreams whose circuit is open are skipped without a network call (upstreams/circuit.py; a success
  on a closed circuit costs one cache round trip in all). A call counts at most one failure per
  upstream, so the threshold counts distinct calls. When every upstream is open, the process lets one
  call per cooldown through (`circuit_admit_panic`).
- The upstream that answers a call naming a conversation is recorded as that conversation's
  (upstreams/affinity.py): its next calls try it first.
- The call ends with UpstreamsOverloaded when every upstream answered 503 (or 529),
  UpstreamsCircuitOpen when every circuit is open, UpstreamsRateLimited (with retry_after) when every
  upstream said 429, UpstreamDeadlineExceeded when the deadline ran out, else UpstreamsFailed naming
  the last upstream status (upstreams/errors.py; api.errors maps them to 503, 429, 504 and 502).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings

from core.metrics import upstream_attempt_observe
from upstreams.affinity import Affinity, affinity_upstream_record
from upstreams.circuit import (
    Admission,
    circuit_admit,
    circuit_admit_panic,
    circuit_open_until,
    circuit_record_failure,
    circuit_record_success,
)
from upstreams.errors import (
    NoUpstreamAvailable,
    UpstreamDeadlineExceeded,
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamsCircuitOpen,
    UpstreamsFailed,
    UpstreamsOverloaded,
    UpstreamsRateLimited,
)
from upstreams.snapshots import UpstreamSnapshot

logger = logging.getLogger("gateway.upstream")
T = TypeVar("T")

# 529 is Anthropic's "overloaded": a 503 by another number.
OVERLOADED_STATUSES = frozenset({503, 529})
RETRYABLE_STATUSES = frozenset({429, 500, 502, 504}) | OVERLOADED_STATUSES


@dataclass(frozen=True)
class RetryPolicy:
    base_delay: float
    max_wait: float
    max_retries: int
    deadline: float
    jitter: float
    circuit_threshold: int
    circuit_cooldown: float

    @classmethod
    def for_upstream(cls, upstream: UpstreamSnapshot) -> RetryPolicy:
        """The policy of a call is that of its first (primary) upstream; 0/None fields use the defaults."""
        defaults = settings.GATEWAY_RETRY

        def pick(field: str, key: str) -> float:
            value = getattr(upstream, field, None)
            return defaults[key] if value in (None, "") else value

        return cls(
            base_delay=float(pick("retry_base_seconds", "base_delay")),
            max_wait=float(pick("retry_max_wait_seconds", "max_wait")),
            max_retries=int(pick("max_retries", "max_retries")),
            deadline=float(pick("retry_deadline_seconds", "deadline")),
            jitter=float(defaults["jitter"]),
            circuit_threshold=int(pick("circuit_threshold", "circuit_threshold")),
            circuit_cooldown=float(pick("circuit_cooldown_seconds", "circuit_cooldown")),
        )

    def backoff(self, round_number: int, retry_after: float | None) -> float:
        delay = self.base_delay * 2.0**round_number
        delay *= 1 + random.uniform(-self.jitter, self.jitter)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_wait)


@dataclass
class _Failure:
    upstream: UpstreamSnapshot
    error: UpstreamError


class _Call:
    """One call's state across its attempts (see the module's rules)."""

    def __init__(self, *, policy: RetryPolicy, request_id: str, clock: Callable[[], float]) -> None:
        self.policy = policy
        self.request_id = request_id
        self.clock = clock
        self.failures: list[_Failure] = []
        self.attempts = 0
        # Upstreams whose failure this call has counted toward their circuit: once each, so the
        # threshold counts distinct calls and one caller's retries cannot open a circuit alone.
        self.counted: set[int] = set()
        # Upstreams this call never tries again (misconfigured: no retry or wait can mend it).
        self.excluded: set[int] = set()
        self.misconfigured: _Failure | None = None
        # Upstream id -> clock() before which it asked (Retry-After on a 429) not to be called.
        self.not_before: dict[int, float] = {}

    def candidate(self, upstream: UpstreamSnapshot) -> bool:
        return upstream.pk not in self.excluded and self.not_before.get(upstream.pk, 0.0) <= self.clock()

    def failed(
        self,
        upstream: UpstreamSnapshot,
        exc: UpstreamError,
        admission: Admission,
        classify: Callable[[UpstreamError, UpstreamSnapshot], Exception],
    ) -> None:
        """Book a failed attempt; raises the caller's error when it must not be retried."""
        if isinstance(exc, UpstreamMisconfigured):
            # An operator problem, not the upstream's health: never retried, waited for or counted.
            self.excluded.add(upstream.pk)
            self.misconfigured = self.misconfigured or _Failure(upstream, exc)
            logger.error(
                "upstream %s is misconfigured request_id=%s: %s", upstream.name, self.request_id, exc
            )
            return
        if _counts_against_upstream(exc) and (admission.probe or upstream.pk not in self.counted):
            self.counted.add(upstream.pk)
            circuit_record_failure(
                upstream_id=upstream.pk,
                threshold=self.policy.circuit_threshold,
                cooldown=self.policy.circuit_cooldown,
            )
        if exc.outcome_unknown:
            # The provider may have produced and billed the image: never try again.
            logger.warning(
                "upstream outcome unknown upstream=%s request_id=%s: %s", upstream.name, self.request_id, exc
            )
            raise classify(exc, upstream) from exc
        if not _retryable(exc):
            raise classify(exc, upstream) from exc
        if exc.status == 429 and exc.retry_after:
            self.not_before[upstream.pk] = self.clock() + exc.retry_after
        self.failures.append(_Failure(upstream, exc))
        logger.info(
            "upstream attempt failed upstream=%s status=%s request_id=%s: %s",
            upstream.name,
            exc.status,
            self.request_id,
            exc.message,
        )

    def admissible_after(self, upstreams: Sequence[UpstreamSnapshot], delay: float) -> bool:
        """Whether any upstream could be tried after waiting `delay`: not excluded, past its Retry-After,
        and its circuit closed or due to let a probe through by then."""
        wake, wall_wake = self.clock() + delay, time.time() + delay
        for upstream in upstreams:
            if upstream.pk in self.excluded or self.not_before.get(upstream.pk, 0.0) > wake:
                continue
            open_until = circuit_open_until(upstream_id=upstream.pk)
            if open_until is None or open_until <= wall_wake:
                return True
        return False


def upstream_call_resilient(
    *,
    upstreams: Sequence[UpstreamSnapshot],
    attempt: Callable[[UpstreamSnapshot, float], T],
    request_id: str = "",
    classify: Callable[[UpstreamError, UpstreamSnapshot], Exception],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    affinity: Affinity | None = None,
) -> tuple[T, UpstreamSnapshot]:
    """Call `attempt(upstream, deadline)` until one succeeds, following the module's rules.

    `attempt` gets the absolute `clock()` deadline its own timeouts must respect (the transport cuts
    each read timeout to what is left). `classify` turns a non-retryable UpstreamError (e.g. a 400
    about the request) into the error the caller's layer raises (api.upstream_errors for /v1).
    `affinity`: the call's conversation, which the upstream that answers keeps.
    """
    if not upstreams:
        raise NoUpstreamAvailable("No upstream is available for this model right now.", retry_after=30)
    policy = RetryPolicy.for_upstream(upstreams[0])
    # The whole call, attempts and waits, ends by the deadline (the spec's total, not a time after
    # the first attempt's timeout).
    deadline = clock() + policy.deadline
    call = _Call(policy=policy, request_id=request_id, clock=clock)
    round_number = 0
    while True:
        for upstream in upstreams:
            if call.attempts > policy.max_retries:
                break
            if not call.candidate(upstream):
                continue
            if clock() >= deadline:
                raise _deadline_error(call.failures, request_id)
            admission = circuit_admit(upstream_id=upstream.pk, cooldown=policy.circuit_cooldown)
            if admission is None:
                continue
            outcome = _attempt(call, upstream, admission, attempt, deadline, classify)
            if outcome is not None:
                return _answered(outcome[0], upstream, affinity)
        if call.attempts == 0:
            # Every upstream still worth trying is open: this process lets one call through one of them
            # per cooldown rather than refusing everyone (upstreams/circuit.py).
            for upstream in upstreams:
                if not call.candidate(upstream) or clock() >= deadline:
                    continue
                admission = circuit_admit_panic(upstream_id=upstream.pk, cooldown=policy.circuit_cooldown)
                if admission is None:
                    continue
                outcome = _attempt(call, upstream, admission, attempt, deadline, classify)
                if outcome is not None:
                    return _answered(outcome[0], upstream, affinity)
                break
        if not call.failures:
            if call.misconfigured is not None:
                failed = call.misconfigured
                raise classify(failed.error, failed.upstream) from failed.error
            # Nothing was even tried: every circuit is open.
            raise UpstreamsCircuitOpen(
                "Every upstream for this model is failing; the gateway is not sending calls to them for now.",
                retry_after=policy.circuit_cooldown,
            )
        if call.attempts > policy.max_retries:
            raise _exhausted_error(call.failures, request_id)
        retry_after = max((f.error.retry_after or 0.0 for f in call.failures), default=0.0) or None
        delay = policy.backoff(round_number, retry_after)
        if clock() + delay >= deadline:
            raise _deadline_error(call.failures, request_id)
        if not call.admissible_after(upstreams, delay):
            # Never wait for an attempt that will not be made.
            raise _exhausted_error(call.failures, request_id)
        sleep(delay)
        round_number += 1


def _answered(result: T, upstream: UpstreamSnapshot, affinity: Affinity | None) -> tuple[T, UpstreamSnapshot]:
    if affinity is not None:
        affinity_upstream_record(affinity=affinity, upstream_id=upstream.pk)
    return result, upstream


def _attempt(
    call: _Call,
    upstream: UpstreamSnapshot,
    admission: Admission,
    attempt: Callable[[UpstreamSnapshot, float], T],
    deadline: float,
    classify: Callable[[UpstreamError, UpstreamSnapshot], Exception],
) -> tuple[T] | None:
    """One attempt: (its result,) on success, None after a failure worth going on from."""
    retry, started = bool(call.attempts or call.excluded), time.monotonic()
    try:
        result = attempt(upstream, deadline)
    except UpstreamMisconfigured as exc:
        _attempt_observe(upstream, started, retry, exc)
        call.failed(upstream, exc, admission, classify)
        return None
    except UpstreamError as exc:
        _attempt_observe(upstream, started, retry, exc)
        call.attempts += 1
        call.failed(upstream, exc, admission, classify)
        return None
    _attempt_observe(upstream, started, retry, None)
    call.attempts += 1
    circuit_record_success(upstream_id=upstream.pk, admission=admission)
    return (result,)


def _attempt_observe(
    upstream: UpstreamSnapshot, started: float, retry: bool, error: UpstreamError | None
) -> None:
    """The attempt in the Prometheus metrics (core/metrics.py), its failure by class."""
    upstream_attempt_observe(
        upstream=upstream.name,
        seconds=time.monotonic() - started,
        retry=retry,
        failure=None if error is None else _failure_class(error),
    )


def _failure_class(error: UpstreamError) -> str:
    if isinstance(error, UpstreamMisconfigured):
        return "misconfigured"
    if error.status is None:
        return "connect"
    if error.status == 504:
        return "timeout"
    if error.outcome_unknown:
        return "dropped"
    if error.status == 429:
        return "429"
    return "5xx" if error.status >= 500 else "4xx"


def _retryable(error: UpstreamError) -> bool:
    if error.status is None:
        return error.retryable
    return error.status in RETRYABLE_STATUSES


def _counts_against_upstream(error: UpstreamError) -> bool:
    """A 5xx, a connection failure or an unknown outcome says the upstream is unwell. A 4xx about the
    request says nothing of it, and a 429 only that it asks for a pause (honoured per call through
    Retry-After): counted, one caller's burst would shut the upstream out for everyone."""
    if error.outcome_unknown:
        return True
    return error.status is None or error.status >= 500


def _all_status(failures: list[_Failure], *statuses: int | None) -> bool:
    return bool(failures) and all(f.error.status in statuses for f in failures)


def _exhausted_error(
    failures: list[_Failure], request_id: str
) -> UpstreamsRateLimited | UpstreamsOverloaded | UpstreamsFailed:
    if _all_status(failures, 429):
        wait = max((f.error.retry_after or 0.0 for f in failures), default=0.0) or 1.0
        return UpstreamsRateLimited(
            "Every upstream for this model is rate limiting the gateway; retry later.", retry_after=wait
        )
    if _all_status(failures, *OVERLOADED_STATUSES):
        return UpstreamsOverloaded(
            "Every upstream for this model is overloaded or in maintenance; retry later.", retry_after=5
        )
    last = failures[-1].error if failures else None
    last_status = last.status if last and last.status is not None else "no answer (connection failed)"
    logger.error("upstream repeatedly failed request_id=%s last_status=%s", request_id, last_status)
    return UpstreamsFailed(f"The upstream repeatedly failed (last upstream status: {last_status}).")


def _deadline_error(
    failures: list[_Failure], request_id: str
) -> UpstreamDeadlineExceeded | UpstreamsRateLimited | UpstreamsOverloaded | UpstreamsFailed:
    """The deadline ran out (or waiting would pass it): 504, unless every upstream said 429 or 503/529,
    which tells the caller more (and carries Retry-After)."""
    if _all_status(failures, 429) or _all_status(failures, *OVERLOADED_STATUSES):
        return _exhausted_error(failures, request_id)
    logger.error(
        "upstream deadline exceeded request_id=%s after %d failed attempts", request_id, len(failures)
    )
    return UpstreamDeadlineExceeded("The upstream did not produce a result within the gateway's deadline.")
