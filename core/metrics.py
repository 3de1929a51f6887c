"""The gateway's Prometheus metrics: every metric recorded while calls run, and the hooks that record
them (README, "Metrics"). What is read at scrape time instead (holds, circuits) is in
monitoring/collectors.py, which may import the apps that own those tables.

Labels carry only an endpoint (`images.generations`, `chat.completions`, ...), a model id, a group id,
an upstream name, an HTTP status, a failure class or a token kind: never a key, an account, a user
or a request id, so a label's values stay few and nothing secret reaches a scrape.

Under gunicorn every worker process records into its own files in PROMETHEUS_MULTIPROC_DIR
(gunicorn.conf.py sets it) and a scrape adds them up, whichever worker answers it. Without that
variable (tests, `manage.py runserver`) the metrics live in this process's default registry.
prometheus_client decides between the two when it is first imported, so nothing that runs before
gunicorn.conf.py may import it.

The hooks never raise: a metric must never turn a call's answer into an error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

logger = logging.getLogger("gateway.metrics")

# Seconds: an image call takes from a fraction of a second (cached, demo) to minutes (large edits).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)

# The refusals counted by reason: the error codes the limits and the reservation raise.
REFUSAL_REASONS = {
    "rate_limit_exceeded": "rate_limited",
    "concurrency_limit_exceeded": "concurrency",
    "INSUFFICIENT_BALANCE": "insufficient_balance",
    "USAGE_LIMIT_EXCEEDED": "usage_limit_exceeded",
}
TOKEN_KINDS = ("input", "cached", "cache_write", "output")

REQUESTS = Counter(
    "gateway_requests",
    "Calls of the billed endpoints (and count_tokens), by how they ended; counted when the call's "
    "usage record is written (a stream: when it ends). Calls refused before a key was verified are "
    "not counted.",
    ["endpoint", "model", "group", "status"],
)
REQUEST_SECONDS = Histogram(
    "gateway_request_duration_seconds",
    "Whole duration of a call, from its usage scope opening to its record (a stream: to its end).",
    ["endpoint"],
    buckets=LATENCY_BUCKETS,
)
CHARGED = Counter(
    "gateway_charged_amount",
    "Amount charged (wallet groups) or counted against caps (subscription groups), by model; a float "
    "of the exact Decimal, for graphs only: the ledger is the account of record.",
    ["model", "group"],
)
TOKENS = Counter(
    "gateway_tokens",
    "Tokens of text calls as the upstream reported them, by kind (input excludes cached and "
    "cache_write; output includes reasoning).",
    ["model", "group", "kind"],
)
REFUSALS = Counter(
    "gateway_refusals",
    "Calls refused by a limit or the reservation, by reason.",
    ["reason"],
)
UPSTREAM_SECONDS = Histogram(
    "gateway_upstream_attempt_duration_seconds",
    "Duration of one attempt at an upstream (a stream's attempt: until its first event).",
    ["upstream"],
    buckets=LATENCY_BUCKETS,
)
UPSTREAM_ATTEMPTS = Counter(
    "gateway_upstream_attempts",
    "Attempts at an upstream, first tries and retries alike.",
    ["upstream"],
)
UPSTREAM_RETRIES = Counter(
    "gateway_upstream_retries",
    "Attempts that were not their call's first (a failover to another upstream or a retry after a wait).",
    ["upstream"],
)
UPSTREAM_FAILURES = Counter(
    "gateway_upstream_failures",
    "Failed attempts at an upstream by class: 5xx, 4xx, 429, timeout (504 or read timeout), connect "
    "(never connected), dropped (connection lost mid-answer), misconfigured (its key variable unset).",
    ["upstream", "class"],
)
STREAM_LOOP_STREAMS = Counter(
    "gateway_stream_loop_streams",
    "Streams whose events a worker's stream loop relayed straight to the caller (api/stream_loop.py), "
    "counted as they leave it, by how they left it (left: final event, end or error; caller_gone; "
    "timed_out).",
    ["outcome"],
)
CALLS_SHED = Counter(
    "gateway_calls_shed",
    "New /v1 calls answered 503 overloaded at once, before anything was reserved, because the worker "
    "process was further behind than GATEWAY_SHED_LAG_SECONDS (api/shedding.py).",
)
STREAMS_OPEN = Gauge(
    "gateway_streams_open",
    "Streamed answers (images and text) being relayed now.",
    ["endpoint"],
    multiprocess_mode="livesum",
)


# The labelled children of the per-call metrics, kept once made: `labels()` checks its arguments,
# builds the key and takes the metric's lock on every call. Keyed by metric and label values, in the
# metric's label order; as many as the metrics themselves keep (prometheus_client never drops one).
_children: dict[tuple[object, ...], Any] = {}


def _child(metric: Counter | Histogram, *values: str) -> Any:
    """`metric.labels(*values)`, made once per label values."""
    key = (metric, *values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def call_observe(
    *,
    endpoint: str,
    model: str,
    group: int | None,
    status: int,
    error_code: str,
    seconds: float,
    charged: Decimal,
    tokens: Mapping[str, int] | None,
) -> None:
    """Record one call when its usage scope closes (api.usage). Never raises."""
    try:
        group_label = "" if group is None else str(group)
        _child(REQUESTS, endpoint, model, group_label, str(status)).inc()
        _child(REQUEST_SECONDS, endpoint).observe(seconds)
        if charged:
            _child(CHARGED, model, group_label).inc(float(charged))
        for kind in TOKEN_KINDS:
            count = (tokens or {}).get(kind, 0)
            if count:
                _child(TOKENS, model, group_label, kind).inc(count)
        reason = REFUSAL_REASONS.get(error_code)
        if reason is not None:
            REFUSALS.labels(reason=reason).inc()
    except Exception:
        logger.exception("could not record the metrics of a call")


def upstream_attempt_observe(*, upstream: str, seconds: float, retry: bool, failure: str | None) -> None:
    """Record one attempt at an upstream (upstreams.resilience); `failure` is its class, None on
    success. Never raises."""
    try:
        _child(UPSTREAM_ATTEMPTS, upstream).inc()
        _child(UPSTREAM_SECONDS, upstream).observe(seconds)
        if retry:
            UPSTREAM_RETRIES.labels(upstream=upstream).inc()
        if failure is not None:
            UPSTREAM_FAILURES.labels(upstream=upstream, **{"class": failure}).inc()
    except Exception:
        logger.exception("could not record the metrics of an upstream attempt")


def stream_counted(events: Iterator[bytes], *, endpoint: str) -> Iterator[bytes]:
    """`events`, counted in gateway_streams_open from the first event asked for until the stream is
    over, however it ends (closing this closes `events`)."""
    gauge = STREAMS_OPEN.labels(endpoint=endpoint)
    gauge.inc()
    try:
        yield from events
    finally:
        gauge.dec()


def call_shed() -> None:
    """Count one call shed (api/shedding.py). Never raises."""
    try:
        CALLS_SHED.inc()
    except Exception:  # pragma: no cover - a metric never turns an answer into an error
        logger.exception("could not count a shed call")
