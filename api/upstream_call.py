"""The one place a call's upstream attempts start, for every family.

Each attempt names its upstream on the usage record and hands the call's database connection back to
the pool first (a call waiting on an upstream, for a whole stream perhaps, holds none; capture takes one
again), then runs the family's own attempt under the resilience rules (retries, failover, circuits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from api.metering import connection_release
from api.upstream_errors import upstream_error_to_api_error
from api.usage import UsageScope
from core.overload import call_started
from upstreams.affinity import Affinity
from upstreams.resilience import upstream_call_resilient
from upstreams.snapshots import UpstreamSnapshot

T = TypeVar("T")


def upstream_attempts_run(
    *,
    usage: UsageScope,
    upstreams: Sequence[UpstreamSnapshot],
    request_id: str,
    attempt: Callable[[UpstreamSnapshot, float], T],
    affinity: Affinity | None = None,
) -> tuple[T, UpstreamSnapshot]:
    """Run `attempt(upstream, deadline)` over `upstreams` until one succeeds; its result and upstream.

    A non-retryable upstream error becomes the caller's ApiError for that upstream. The upstream that
    answers keeps the call's conversation (`affinity`, upstreams/affinity.py)."""

    def attempt_started(upstream: UpstreamSnapshot, deadline: float) -> T:
        usage.set_upstream(upstream.name)
        connection_release()
        call_started()  # how long this process took to get the call here (api/shedding.py)
        return attempt(upstream, deadline)

    return upstream_call_resilient(
        upstreams=upstreams,
        attempt=attempt_started,
        request_id=request_id,
        classify=lambda error, failed: upstream_error_to_api_error(error=error, upstream=failed),
        affinity=affinity,
    )
