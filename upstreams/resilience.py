"""Retries with backoff, failover across upstreams, circuit breaking and a deadline for one call.

The rules (spec, "Recommended retry behaviour"; docs/images.md, "Routing and upstream resilience"):
- Upstreams are tried in `upstreams_for_model` order (priority, then weight). A retryable failure
  (connection refused or reset before the request went out, 429, 500, 502, 503, 504, and Anthropic's
  529 "overloaded") moves on to the next upstream at once; only when every upstream has been tried
  in a round does the call wait
  (1 s x 2^round, +-20 % jitter, at least the largest Retry-After seen, at most 30 s) and start
  another round. At most 5 retries in all, and the whole call ends by its deadline (60 s beyond the
  first upstream's own timeout).
- A failure after the request was sent (read timeout, connection dropped mid-answer) is never
  retried: the provider may have made, and billed, the image. The call ends 504 or 502 and is logged
  as "outcome unknown".
- Upstreams whose circuit is open are skipped without a network call (upstreams/circuit.py; a success
  on a closed circuit costs one cache round trip in all).
- The caller gets 503 when every upstream answered 503 (or 529) or every circuit is open, 429 (with
  Retry-After) when every upstream said 429, 504 when the deadline ran out, else 502 naming the last
  upstream status.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings

from core.errors import ApiError, RateLimited, UpstreamFailed
from upstreams.circuit import circuit_admit, circuit_record_failure, circuit_record_success
from upstreams.errors import UpstreamError
from upstreams.models import Upstream

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
    def for_upstream(cls, upstream: Upstream) -> RetryPolicy:
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
        delay = self.base_delay * (2**round_number)
        delay *= 1 + random.uniform(-self.jitter, self.jitter)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.max_wait)


@dataclass
class _Failure:
    upstream: Upstream
    error: UpstreamError


def upstream_call_resilient(
    *,
    upstreams: Sequence[Upstream],
    attempt: Callable[[Upstream, float], T],
    request_id: str = "",
    classify: Callable[[UpstreamError, Upstream], ApiError],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, Upstream]:
    """Call `attempt(upstream, deadline)` until one succeeds, following the module's rules.

    `attempt` gets the absolute `clock()` deadline its own timeouts must respect. `classify` turns a
    non-retryable UpstreamError (e.g. a 400 about the request) into the caller's ApiError.
    """
    if not upstreams:
        raise UpstreamFailed(
            "No upstream is available for this model right now.",
            status=503,
            code="no_upstream_available",
            retry_after=30,
        )
    policy = RetryPolicy.for_upstream(upstreams[0])
    deadline = clock() + float(upstreams[0].timeout_seconds) + policy.deadline
    failures: list[_Failure] = []
    skipped_open = 0
    attempts = 0
    round_number = 0
    while True:
        tried_this_round = 0
        for upstream in upstreams:
            if attempts > policy.max_retries:
                break
            if clock() >= deadline:
                raise _deadline_error(failures, request_id)
            admission = circuit_admit(upstream_id=upstream.pk, cooldown=policy.circuit_cooldown)
            if admission is None:
                skipped_open += 1
                continue
            attempts += 1
            tried_this_round += 1
            try:
                result = attempt(upstream, deadline)
            except UpstreamError as exc:
                _record_failure(upstream, exc, policy)
                if exc.outcome_unknown:
                    # The provider may have produced and billed the image: never try again.
                    logger.warning(
                        "upstream outcome unknown upstream=%s request_id=%s: %s",
                        upstream.name,
                        request_id,
                        exc,
                    )
                    raise classify(exc, upstream) from exc
                if not _retryable(exc):
                    raise classify(exc, upstream) from exc
                failures.append(_Failure(upstream, exc))
                logger.info(
                    "upstream attempt failed upstream=%s status=%s request_id=%s: %s",
                    upstream.name,
                    exc.status,
                    request_id,
                    exc.message,
                )
                continue
            circuit_record_success(upstream_id=upstream.pk, admission=admission)
            return result, upstream
        if not failures and tried_this_round == 0:
            # Nothing was even tried: every circuit is open.
            raise UpstreamFailed(
                "Every upstream for this model is failing; the gateway is not sending calls to them for now.",
                status=503,
                code="upstreams_unavailable",
                retry_after=policy.circuit_cooldown,
            )
        if attempts > policy.max_retries or tried_this_round == 0:
            raise _exhausted_error(failures, request_id)
        retry_after = (
            max((f.error.retry_after or 0.0 for f in failures[-tried_this_round:]), default=0.0) or None
        )
        delay = policy.backoff(round_number, retry_after)
        if clock() + delay >= deadline:
            raise _deadline_error(failures, request_id)
        sleep(delay)
        round_number += 1


def _retryable(error: UpstreamError) -> bool:
    if error.status is None:
        return error.retryable
    return error.status in RETRYABLE_STATUSES


def _record_failure(upstream: Upstream, error: UpstreamError, policy: RetryPolicy) -> None:
    # A 4xx about the request says nothing about the upstream's health.
    if error.status is None or error.status >= 500 or error.status == 429 or error.outcome_unknown:
        circuit_record_failure(
            upstream_id=upstream.pk, threshold=policy.circuit_threshold, cooldown=policy.circuit_cooldown
        )


def _all_status(failures: list[_Failure], *statuses: int | None) -> bool:
    return bool(failures) and all(f.error.status in statuses for f in failures)


def _exhausted_error(failures: list[_Failure], request_id: str) -> ApiError:
    if _all_status(failures, 429):
        wait = max((f.error.retry_after or 0.0 for f in failures), default=0.0) or 1.0
        return RateLimited(
            "Every upstream for this model is rate limiting the gateway; retry later.",
            code="upstream_rate_limited",
            retry_after=wait,
        )
    if _all_status(failures, *OVERLOADED_STATUSES):
        return UpstreamFailed(
            "Every upstream for this model is overloaded or in maintenance; retry later.",
            status=503,
            code="upstream_unavailable",
            retry_after=5,
        )
    last = failures[-1].error if failures else None
    last_status = last.status if last and last.status is not None else "no answer (connection failed)"
    logger.error("upstream repeatedly failed request_id=%s last_status=%s", request_id, last_status)
    return UpstreamFailed(f"The upstream repeatedly failed (last upstream status: {last_status}).")


def _deadline_error(failures: list[_Failure], request_id: str) -> ApiError:
    """The deadline ran out (or waiting would pass it): 504, unless every upstream said 429 or 503/529,
    which tells the caller more (and carries Retry-After)."""
    if _all_status(failures, 429) or _all_status(failures, *OVERLOADED_STATUSES):
        return _exhausted_error(failures, request_id)
    logger.error(
        "upstream deadline exceeded request_id=%s after %d failed attempts", request_id, len(failures)
    )
    return UpstreamFailed(
        "The upstream did not produce a result within the gateway's deadline.",
        status=504,
        code="upstream_timeout",
    )
