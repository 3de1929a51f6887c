"""The billed text call: parse → resolve → validate → idempotency → limits + hold (the ceiling) →
upstream → capture the exact cost → answer. Views stay thin; every text endpoint runs this sequence.

The body is forwarded as the caller sent it, with only `model` replaced by the model's upstream name
(and, for a streamed chat completion, `stream_options.include_usage` turned on so the gateway learns
the usage). The upstream's answer goes back as it came: a success with its own body, a 4xx about the
request in the upstream's own shape and status. docs/text.md describes the rules.
"""

from __future__ import annotations

import json
import logging
from contextlib import ExitStack
from decimal import Decimal
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from rest_framework.request import Request

from api.answers import (
    CallAnswer,
    StoredResponse,
    call_answer,
    event_stream_response,
    request_fingerprint,
    stored_response,
    stream_idempotency_refused,
)
from api.idempotency import idempotent_answer
from api.metering import metered_begin, metered_call
from api.stream_loop import CallerSocket, caller_socket
from api.upstream_call import upstream_attempts_run
from api.usage import UsageScope, usage_scope
from billing.limits import rate_limit_hit
from chat.access import ResolvedTextModel, text_model_resolve
from chat.answers import refusal_passthrough, tokens_charge
from chat.families import CHAT, Family
from chat.pricing import text_call_ceiling
from chat.streaming import StreamBody, StreamedTextCall, stream_open, text_stream_relay
from chat.validation import TextBody, input_ceiling_tokens, output_limit_validate, text_body_parse
from core.errors import UpstreamFailed
from core.metrics import stream_counted
from keys.credentials import Credential
from upstreams.providers import adapter_for
from upstreams.providers.base import TextReply, TextRequest
from upstreams.snapshots import UpstreamSnapshot

logger = logging.getLogger("gateway.text")

# Caller headers that go on to the upstream (Anthropic's API version and beta features).
FORWARDED_HEADERS = {"anthropic-version": "HTTP_ANTHROPIC_VERSION", "anthropic-beta": "HTTP_ANTHROPIC_BETA"}


def text_call_handle(*, request: Request, family: Family) -> HttpResponse | StreamingHttpResponse:
    """The text views: run the call for the authenticated request and answer it."""
    meta = request.META
    answer = text_call_run(
        credential=request.auth,
        family=family,
        raw=request.body,
        headers={name: meta[key] for name, key in FORWARDED_HEADERS.items() if meta.get(key)},
        request_id=request.request_id,
        idempotency_key=meta.get("HTTP_IDEMPOTENCY_KEY"),
        caller=caller_socket(meta),
    )
    if isinstance(answer, StreamedTextCall):
        return event_stream_response(answer.events)
    return stored_response(answer)


def text_call_answer(
    *,
    credential: Credential,
    family: Family,
    raw: bytes,
    headers: dict[str, str],
    request_id: str,
    idempotency_key: str | None = None,
) -> CallAnswer:
    """One text call, not streamed, its answer as data for a caller that shows it (the console's chat
    playground); raises ApiError on any refusal or failure, as text_call_run does. `raw` does not ask
    for a stream (a stream has no answer to return)."""
    answer = text_call_run(
        credential=credential,
        family=family,
        raw=raw,
        headers=headers,
        request_id=request_id,
        idempotency_key=idempotency_key,
    )
    assert isinstance(answer, StoredResponse), "a text call asking for a stream has no answer as data"
    return call_answer(answer)


def text_call_run(
    *,
    credential: Credential,
    family: Family,
    raw: bytes,
    headers: dict[str, str],
    request_id: str,
    idempotency_key: str | None = None,
    caller: CallerSocket | None = None,
) -> StoredResponse | StreamedTextCall:
    """One text call for a verified credential; raises ApiError on any refusal or failure.

    Streamed, the answer is a StreamedTextCall that owns the usage scope and the hold until the
    stream ends; the upstream has already sent its first event by then (failover happens before).
    `caller` is the caller's connection for the stream loop (api/stream_loop.py), when it runs."""
    with ExitStack() as stack:
        usage = stack.enter_context(
            usage_scope(request_id=request_id, endpoint=family.endpoint, credential=credential)
        )
        parsed = text_body_parse(raw=raw, family=family)
        usage.set_requested_model(parsed.model)
        resolved = text_model_resolve(credential=credential, requested_model=parsed.model, family=family)
        text_model = resolved.text_model
        usage.set_target(group=resolved.group, model_id=text_model.model_id)
        output_limit = output_limit_validate(body=parsed.body, family=family, text_model=text_model)
        text_request = TextRequest(
            operation=family.operation,
            body=_forward_body(parsed=parsed, resolved=resolved, family=family),
            stream=parsed.stream,
            headers=headers,
            request_id=request_id,
        )
        if not family.billed:
            # Free (token counting), but authenticated, group-checked and rate-limited.
            rate_limit_hit(limit_key=credential.limit_key, rpm=resolved.group.rpm)
            return _answer(reply_and_upstream=_call(usage=usage, resolved=resolved, request=text_request))
        ceiling = text_call_ceiling(
            text_model=text_model,
            input_tokens=input_ceiling_tokens(body=parsed.body),
            output_tokens=output_limit,
        )
        if parsed.stream:
            if idempotency_key is not None:
                raise stream_idempotency_refused()
            meter = metered_begin(
                usage=usage,
                credential=credential,
                group=resolved.group,
                model_id=text_model.model_id,
                price=ceiling,
            )
            stack.callback(meter.close)
            opened = stream_open(usage=usage, resolved=resolved, request=text_request, family=family)
            owned = stack.pop_all()  # from here the stream owns the usage scope and the hold
            after = ExitStack()  # what waits until the caller has the end of the answer
            relay = text_stream_relay(
                owned=owned,
                usage=usage,
                meter=meter,
                family=family,
                resolved=resolved,
                opened=opened,
                usage_asked=_usage_asked(parsed.body),
                after=after,
                caller=caller,
            )
            return StreamedTextCall(
                events=StreamBody(stream_counted(relay, endpoint=usage.endpoint), after=after)
            )
        return idempotent_answer(
            account=credential.account,
            key=idempotency_key,
            reference=request_id,
            fingerprint=(
                request_fingerprint(path=family.path, group_id=resolved.group.pk, content=(raw,))
                if idempotency_key is not None
                else ""
            ),
            produce=lambda: _produce(
                usage=usage,
                credential=credential,
                resolved=resolved,
                family=family,
                request=text_request,
                ceiling=ceiling,
            ),
        )


def _forward_body(*, parsed: TextBody, resolved: ResolvedTextModel, family: Family) -> bytes:
    body = dict(parsed.body)
    body["model"] = resolved.text_model.upstream_model_name
    if parsed.stream and family is CHAT:
        options = body.get("stream_options")
        body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _usage_asked(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _call(
    *, usage: UsageScope, resolved: ResolvedTextModel, request: TextRequest
) -> tuple[TextReply, UpstreamSnapshot]:
    """One non-streamed call through the model's upstreams with retries and failover: the upstream's
    success, or its 4xx about the request (passed through), read whole."""

    def attempt(upstream: UpstreamSnapshot, deadline: float) -> TextReply:
        return adapter_for(upstream, deadline=deadline).call(request.operation, request)

    return upstream_attempts_run(
        usage=usage,
        upstreams=resolved.upstreams,
        attempt=attempt,
        request_id=request.request_id,
    )


def _answer(*, reply_and_upstream: tuple[TextReply, UpstreamSnapshot]) -> StoredResponse:
    """The upstream's answer for the caller: its success as it came, or its refusal passed through."""
    reply, upstream = reply_and_upstream
    if not 200 <= reply.status < 300:
        raise refusal_passthrough(reply=reply, upstream=upstream)
    return StoredResponse(
        status=reply.status,
        body=reply.body,
        content_type=reply.content_type or "application/json",
        headers={},
    )


def _produce(
    *,
    usage: UsageScope,
    credential: Credential,
    resolved: ResolvedTextModel,
    family: Family,
    request: TextRequest,
    ceiling: Decimal,
) -> StoredResponse:
    """Limits, the hold for the ceiling, the upstream call, and the capture of the exact cost."""

    def call() -> StoredResponse:
        return _answer(reply_and_upstream=_call(usage=usage, resolved=resolved, request=request))

    def charge(answer: StoredResponse) -> Decimal | None:
        try:
            payload = json.loads(answer.body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            raise UpstreamFailed(
                "The model's provider answered without a valid JSON body.", code="upstream_error"
            )
        return tokens_charge(usage=usage, resolved=resolved, tokens=family.tokens_of(payload))

    return metered_call(
        usage=usage,
        credential=credential,
        group=resolved.group,
        model_id=resolved.text_model.model_id,
        price=ceiling,
        call=call,
        charge=charge,
    )
