"""What goes wrong calling an upstream, as the upstreams app knows it: `UpstreamError` (one attempt
failed; its status, body and Retry-After are the provider's) and the errors the retry policy raises
when no attempt succeeded (upstreams/resilience.py). They carry no HTTP answer of the gateway's own:
api/upstream_errors.py answers an UpstreamError, api.errors.DOMAIN_ERRORS the others.
"""

from __future__ import annotations

from typing import Any

from core.errors import DomainError


class UpstreamError(Exception):
    """A failed upstream call. `retryable` says whether another attempt (or upstream) may succeed;
    `sent` says whether the request reached the provider. `outcome_unknown` says the request went out
    but no answer came back (read timeout, connection dropped mid-answer): the provider may have made,
    and billed, the result, so the call must never be repeated blindly."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        retryable: bool,
        body: Any = None,
        sent: bool = False,
        retry_after: float | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.body = body
        self.sent = sent or outcome_unknown
        self.retry_after = retry_after
        self.outcome_unknown = outcome_unknown


class UpstreamMisconfigured(UpstreamError):
    """The gateway cannot call this upstream at all (e.g. its key variable is unset): an operator problem.

    Retryable only elsewhere: another upstream of the model may be configured correctly, but this one
    is never tried again, waited for or counted by its circuit (upstreams/resilience.py)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=None, retryable=True, sent=False)


class NoUpstreamAvailable(DomainError):
    """The model has no upstream to call at all."""

    code = "no_upstream_available"


class UpstreamsCircuitOpen(DomainError):
    """Every upstream of the model is failing: their circuits are open, so none was tried."""

    code = "upstreams_unavailable"


class UpstreamsRateLimited(DomainError):
    """Every upstream tried asked the gateway to slow down (429)."""

    code = "upstream_rate_limited"


class UpstreamsOverloaded(DomainError):
    """Every upstream tried is overloaded or in maintenance (503, 529)."""

    code = "upstream_unavailable"


class UpstreamsFailed(DomainError):
    """The retries were spent and the upstreams kept failing."""

    code = "upstream_error"


class UpstreamDeadlineExceeded(DomainError):
    """The call's deadline ran out before an upstream produced a result."""

    code = "upstream_timeout"


class UrlRefused(DomainError):
    """A URL the gateway was given to request breaks the request-forgery rules (upstreams/ssrf.py), or
    what it answered breaks the request's limits: not canonical, a non-public address, too large, not
    what was asked for."""

    code = "url_refused"
