"""How an upstream's answer to a text call turns into the caller's: a refusal passed through, and the
charge for the usage a finished call reported. Shared by the plain and the streamed call."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from typing import Any

from api.upstream_errors import upstream_error_to_api_error
from api.usage import UsageScope
from billing.usage import TokenCounts
from chat.access import ResolvedTextModel
from chat.families import PASSED_ERROR_SHAPES, Family
from chat.pricing import text_call_cost
from core.errors import ApiError, PassthroughError
from translators import Translator
from upstreams.errors import UpstreamError
from upstreams.providers.base import TextReply
from upstreams.snapshots import UpstreamSnapshot

logger = logging.getLogger("gateway.text")

ERROR_BODY_LIMIT = 64 * 1024


def refusal_passthrough(*, reply: TextReply, upstream: UpstreamSnapshot) -> ApiError:
    """An upstream's 4xx about the request, as the error the caller gets: the upstream's own status
    and shape, its message scrubbed of anything internal (upstreams.errors)."""
    body: Any
    try:
        body = json.loads(reply.body[:ERROR_BODY_LIMIT])
    except ValueError:
        body = reply.body[:ERROR_BODY_LIMIT].decode("utf-8", "replace")
    error = UpstreamError(
        f"upstream refused the request with HTTP {reply.status}",
        status=reply.status,
        retryable=False,
        body=body,
        sent=True,
    )
    return upstream_error_to_api_error(error=error, upstream=upstream)


def refusal_for_caller(
    *, reply: TextReply, upstream: UpstreamSnapshot, translator: Translator | None, family: Family
) -> ApiError:
    """`refusal_passthrough`, in the caller's family's shape: the upstream's status and (scrubbed)
    message kept. A translator writes the body; without one, the upstream's body passes as it is when
    its shape is one the family's callers read (their own, or Google's on the compatible endpoints),
    and is rebuilt in the family's shape otherwise (an Anthropic upstream answering OpenAI's)."""
    error = refusal_passthrough(reply=reply, upstream=upstream)
    if not isinstance(error, PassthroughError):
        return error
    if translator is None:
        if error.shape == family.shape or error.shape in PASSED_ERROR_SHAPES[family.shape]:
            return error
        return ApiError(error.message, status=error.status, type=error.type, code=error.code)
    body = json.loads(translator.error_body(error.status, json.dumps(error.body).encode("utf-8")))
    return PassthroughError(
        status=error.status, body=body, message=error.message, shape=family.shape, code=error.code
    )


def tokens_charge(
    *, usage: UsageScope, resolved: ResolvedTextModel, tokens: TokenCounts | None
) -> Decimal | None:
    """What a finished call costs by the usage its upstream reported (set on the usage record too).
    An upstream that reported none is charged the hold (the most the call could cost), and logged."""
    if tokens is None:
        logger.warning(
            "upstream %s reported no usage for request %s; charging the hold",
            usage.upstream,
            usage.request_id,
        )
        return None
    usage.tokens = tokens
    return text_call_cost(text_model=resolved.text_model, tokens=tokens)
