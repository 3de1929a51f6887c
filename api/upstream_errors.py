"""How a failed upstream call (upstreams.errors.UpstreamError) is answered to the caller (docs/images.md,
"Upstream errors"); the errors the retry policy itself raises are in api.errors.DOMAIN_ERRORS.

| upstream outcome                                   | caller gets                                       |
|----------------------------------------------------|---------------------------------------------------|
| 400, 404, 413, 422 (about the request)             | same status, the upstream's message, native shape |
| 401, 403 (the gateway's provider key is refused)   | 502 upstream_error, logged as an error            |
| 429                                                | 429 rate_limit_error with Retry-After             |
| 504 or read timeout                                | 504 upstream_error                                |
| 5xx, other 4xx, connection failure, invalid body   | 502 upstream_error                                |
| upstream misconfigured (its key variable unset)    | 502 upstream_error, logged as an error            |

Nothing that reaches the caller carries the provider's key, the upstream's URL or host, or any other
internal address: passed-through messages are scrubbed and rebuilt from known fields only.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from core.errors import TYPE_FOR_STATUS, ApiError, PassthroughError, RateLimited, UpstreamFailed
from upstreams.errors import UpstreamError, UpstreamMisconfigured

if TYPE_CHECKING:
    from upstreams.snapshots import UpstreamSnapshot

logger = logging.getLogger("gateway.upstream")

PASSTHROUGH_STATUSES = (400, 404, 413, 422)
MESSAGE_LIMIT = 1000
_REDACTED = "[redacted]"

# Things that may be a credential or an internal address in an upstream's message.
_SCRUB_PATTERNS = (
    re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE),  # any URL
    re.compile(r"\bbearer\s+[^\s\"']+", re.IGNORECASE),
    re.compile(r"\b(?:sk|pk|rk|xai)[-_][A-Za-z0-9_*.\-]{6,}", re.IGNORECASE),  # sk-..., xai-...
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),  # Google API keys
    re.compile(
        r"\b(?:api[_-]?key|access[_-]?token|token|secret|password)\s*[:=]\s*[^\s,;\"']+", re.IGNORECASE
    ),
    re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"),  # IPv4 addresses
    # bracketed IPv6 addresses (two colons at least, so an index such as `messages[1]` stays)
    re.compile(r"\[[0-9a-f]*:[0-9a-f]*:[0-9a-f:]*\](?::\d+)?", re.IGNORECASE),
    re.compile(r"\b[A-Za-z0-9_\-]{40,}\b"),  # long opaque tokens
)


def upstream_error_to_api_error(*, error: UpstreamError, upstream: UpstreamSnapshot) -> ApiError:
    """The answer to the caller for a failed upstream call; logs what the operator must act on."""
    status = error.status
    if isinstance(error, UpstreamMisconfigured):
        logger.error("upstream %s (%s) is misconfigured: %s", upstream.name, upstream.kind, error.message)
        return UpstreamFailed(
            "The gateway is misconfigured for this model's provider; the operator has been alerted.",
            code="upstream_misconfigured",
        )
    if status in (401, 403):
        logger.error(
            "upstream %s (%s) refused the gateway's credentials with HTTP %s: check the key in $%s. "
            "Upstream said: %s",
            upstream.name,
            upstream.kind,
            status,
            upstream.api_key_env or "(no variable configured)",
            _scrub(_message_of(error.body) or "", upstream=upstream),
        )
        return UpstreamFailed(
            f"The model's provider refused the gateway's credentials (HTTP {status}); this is a gateway "
            "configuration problem, not a problem with your request. The operator has been alerted.",
            code="upstream_auth_failed",
        )
    if status in PASSTHROUGH_STATUSES:
        return _passthrough(error=error, upstream=upstream, status=status)
    if status == 429:
        return RateLimited(
            "The model's provider is rate limiting the gateway; retry after a pause.",
            code="upstream_rate_limited",
            retry_after=error.retry_after if error.retry_after is not None else 1,
        )
    if status == 504:
        return UpstreamFailed(
            "The model's provider did not answer in time.", status=504, code="upstream_timeout"
        )
    if status is None:
        logger.warning("upstream %s (%s) unreachable: %s", upstream.name, upstream.kind, error.message)
        return UpstreamFailed(
            "The gateway could not reach the model's provider.", code="upstream_unreachable"
        )
    if status >= 500:
        logger.warning(
            "upstream %s (%s) failed with HTTP %s: %s", upstream.name, upstream.kind, status, error.message
        )
        return UpstreamFailed(
            "The model's provider failed or returned an invalid response.", code="upstream_error"
        )
    # Any other 4xx (402, 405, 409, ...) concerns the gateway's account or integration, not the caller.
    logger.error(
        "upstream %s (%s) answered HTTP %s: %s",
        upstream.name,
        upstream.kind,
        status,
        _scrub(_message_of(error.body) or error.message, upstream=upstream),
    )
    return UpstreamFailed(
        f"The model's provider refused the gateway's request (HTTP {status}).", code="upstream_error"
    )


def _passthrough(*, error: UpstreamError, upstream: UpstreamSnapshot, status: int) -> ApiError:
    """The upstream's own verdict on the request, in its native shape when it has one, scrubbed."""
    body = error.body
    inner = body.get("error") if isinstance(body, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        message = _scrub(inner["message"], upstream=upstream)
        if body.get("type") == "error":
            # Anthropic's shape: {"type": "error", "error": {"type": ..., "message": ...}}
            native_error: dict[str, Any] = {
                "type": "error",
                "error": {"type": _token(inner.get("type")) or "invalid_request_error", "message": message},
            }
            return PassthroughError(
                status=status,
                body=native_error,
                message=message,
                shape="native",
                code=native_error["error"]["type"],
            )
        if isinstance(inner.get("code"), int) and isinstance(inner.get("status"), str):
            # Google's shape: {"error": {"code": 400, "message": ..., "status": "INVALID_ARGUMENT"}}
            native: dict[str, Any] = {
                "error": {"code": status, "message": message, "status": _token(inner["status"].lower())}
            }
            return PassthroughError(
                status=status, body=native, message=message, shape="google", code=native["error"]["status"]
            )
        # OpenAI's shape: {"error": {"message", "type", "param", "code"}}
        native = {
            "error": {
                "message": message,
                "type": _token(inner.get("type")) or TYPE_FOR_STATUS.get(status, "invalid_request_error"),
                "param": _token(inner.get("param")),
                "code": _token(inner.get("code")),
            }
        }
        inner_native = native["error"]
        return PassthroughError(
            status=status,
            body=native,
            message=message,
            shape="compatible",
            code=inner_native["code"] or inner_native["type"],
        )
    # No native shape (e.g. xAI's {"code", "error": "<text>"} or plain text): our compatible shape.
    message = _scrub(_message_of(body) or "", upstream=upstream)
    if not message:
        message = f"The model's provider refused the request (HTTP {status})."
    code = _token(body.get("code")) if isinstance(body, dict) else None
    return ApiError(
        message,
        status=status,
        type="invalid_request_error",
        code=code or ("not_found" if status == 404 else "upstream_invalid_request"),
    )


def _message_of(body: Any) -> str | None:
    """The human-readable message in an upstream error body, whatever its shape."""
    if isinstance(body, str):
        text = body.strip()
        # An HTML page says nothing useful to a caller and may reveal internals.
        return None if text.startswith("<") or "<html" in text.lower() else text
    if not isinstance(body, dict):
        return None
    inner = body.get("error")
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        return inner["message"]
    if isinstance(inner, str):
        return inner
    for key in ("message", "detail"):
        if isinstance(body.get(key), str):
            return body[key]
    return None


def _token(value: Any) -> str | None:
    """A short identifier-like string (type, code, param, status) or None; anything else is dropped."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.\-\[\]]{1,100}", value):
        return value
    return None


def _scrub(text: str, *, upstream: UpstreamSnapshot) -> str:
    """Remove what could be a credential or an internal URL, host or address from an upstream message."""
    secrets = []
    if upstream.api_key_env:
        key = os.environ.get(upstream.api_key_env, "")
        if len(key) >= 4:
            secrets.append(key)
    host = urlsplit(upstream.base_url).hostname if upstream.base_url else None
    if host:
        secrets.append(host)
    for secret in secrets:
        text = re.sub(re.escape(secret), _REDACTED, text, flags=re.IGNORECASE)
    for pattern in _SCRUB_PATTERNS:
        text = pattern.sub(_REDACTED, text)
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"
