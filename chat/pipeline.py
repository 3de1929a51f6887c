"""The billed text call: parse → resolve → validate → idempotency → limits + hold (the ceiling) →
upstream → capture the exact cost → answer. Views stay thin; every text endpoint runs this sequence.

The body is forwarded as the caller sent it, with only `model` replaced by the model's upstream name
(and, for a streamed chat completion, `stream_options.include_usage` turned on so the gateway learns
the usage). The upstream's answer goes back as it came: a success with its own body, a 4xx about the
request in the upstream's own shape and status. On an upstream that speaks another family, the call's
translator (chat/translation.py) makes the body sent, the answer and the errors (in the caller's
family's shape, with the upstream's status and message); the hold's ceiling is computed on the body
sent. docs/text.md describes the rules.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from rest_framework.request import Request

from api.answers import (
    CallAnswer,
    StoredResponse,
    call_answer,
    event_stream_response,
    stored_response,
    stream_idempotency_refused,
)
from api.idempotency import idempotent_answer, request_fingerprint
from api.metering import metered_begin, metered_call, request_rate_limits_hit, reservation_precheck
from api.stream_loop import CallerSocket, caller_socket
from api.upstream_call import upstream_attempts_run
from api.usage import UsageScope, usage_scope
from chat.access import ResolvedTextModel, text_model_resolve
from chat.answers import refusal_for_caller, tokens_charge
from chat.families import CHAT, RESPONSES_FAMILY, Family
from chat.image_links import image_links_inlined, image_links_present
from chat.pricing import text_call_ceiling
from chat.response_store import ResponseThread, response_keep, response_thread_resolve
from chat.snapshots import TextModelSnapshot
from chat.streaming import StreamBody, StreamedTextCall, stream_open, text_stream_relay
from chat.token_count import messages_input_tokens
from chat.translation import Route, Translation, translated_tokens_billed, translator_make
from chat.validation import TextBody, input_ceiling_tokens, output_limit_validate, text_body_parse
from core.errors import InvalidRequest, UpstreamFailed
from core.metrics import stream_counted
from keys.credentials import Credential
from translators import TranslatedCall, TranslationRefused, Translator
from translators.values import json_bytes
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
        resolved = text_model_resolve(
            credential=credential,
            requested_model=parsed.model,
            family=family,
            conversation_key=family.conversation_key(parsed.body),
        )
        text_model = resolved.text_model
        usage.set_target(group=resolved.group, model_id=text_model.model_id)
        output_limit = output_limit_validate(body=parsed.body, family=family, text_model=text_model)
        # A translated Responses call goes on from the answers the gateway kept, and its answer is
        # kept (chat/response_store.py). On a model some of whose upstreams keep their own answers
        # (OpenAI's Responses API), a call naming earlier ones goes only where they are kept.
        thread = None
        if family is RESPONSES_FAMILY and resolved.translates:
            thread = response_thread_resolve(
                account_id=credential.account.pk, body=parsed.body, kept_elsewhere=resolved.serves_natively
            )
            if thread is None:
                resolved = resolved.narrowed(translated=False)
            elif thread.continues and resolved.serves_natively:
                resolved = resolved.narrowed(translated=True)
        translated_from = parsed.body if thread is None else thread.body

        def routed() -> dict[str, Route]:
            return _routes(
                parsed=parsed,
                resolved=resolved,
                family=family,
                translated_from=translated_from,
                headers=headers,
                request_id=request_id,
                output_limit=output_limit,
            )

        def routes_priced() -> PricedRoutes:
            if _downloads_image_links(body=translated_from, resolved=resolved, family=family):
                # Downloading takes seconds and the links' servers' bytes: a call its rate limits,
                # its key's budget or its balance refuse already is refused first, counting nothing
                # (metered_begin counts). Its ceiling is at least its output limit, and its hold
                # that limit's price.
                request_rate_limits_hit(credential=credential, group=resolved.group, count=False)
                reservation_precheck(
                    credential=credential,
                    group=resolved.group,
                    price=text_call_ceiling(
                        text_model=text_model, input_tokens=0, output_tokens=output_limit
                    ),
                    tokens=output_limit,
                )
            return _priced(routes=routed(), text_model=text_model, output_limit=output_limit)

        if not family.billed:
            # Free (token counting), but authenticated, group-checked and rate-limited (not by tpm:
            # it generates nothing), before the routes download any image link.
            request_rate_limits_hit(credential=credential, group=resolved.group)
            if resolved.counted_locally:
                return _counted_locally(body=parsed.body, resolved=resolved)
            answer = _answer(*_call(usage=usage, resolved=resolved, routes=routed()), family=family)
            _json_object(answer.body)
            return answer
        if parsed.stream:
            if idempotency_key is not None:
                raise stream_idempotency_refused()
            priced = routes_priced()
            meter = metered_begin(
                usage=usage,
                credential=credential,
                group=resolved.group,
                model_id=text_model.model_id,
                price=priced.ceiling,
                tokens=priced.token_ceiling,
            )
            stack.callback(meter.close)
            routes = priced.routes
            opened = stream_open(usage=usage, resolved=resolved, routes=routes, family=family)
            route = routes[opened.upstream.kind]
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
                input_ceiling=priced.input_ceiling,
                after=after,
                caller=caller,
                upstream_family=route.upstream_family,
                translator=route.translator,
                thread=thread,
            )
            return StreamedTextCall(
                events=StreamBody(stream_counted(relay, endpoint=usage.endpoint), after=after)
            )
        # The routes are made in the idempotent step: a replay answers what was kept, without
        # downloading the body's image links again (whose servers may no longer have them).
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
                priced=routes_priced(),
                thread=thread,
            ),
        )


@dataclass(frozen=True)
class PricedRoutes:
    """A billed call's routes and what its hold covers: the largest body any upstream of the call may
    be sent (`input_ceiling` tokens) and the output limit, as money (`ceiling`) and as the tokens the
    tokens-per-minute limits admit the call by (`token_ceiling`)."""

    routes: dict[str, Route]
    input_ceiling: int
    ceiling: Decimal
    token_ceiling: int


def _downloads_image_links(*, body: dict[str, Any], resolved: ResolvedTextModel, family: Family) -> bool:
    """Whether making the call's routes downloads image links: an upstream of the model takes no
    image by link and the body its translated routes are made from gives one."""
    return any(
        not translation.upstream_family.takes_image_links for translation in resolved.translations.values()
    ) and image_links_present(body=body, family=family)


def _priced(*, routes: dict[str, Route], text_model: TextModelSnapshot, output_limit: int) -> PricedRoutes:
    input_ceiling = max(
        input_ceiling_tokens(body=route.sent, family=route.upstream_family) for route in routes.values()
    )
    return PricedRoutes(
        routes=routes,
        input_ceiling=input_ceiling,
        ceiling=text_call_ceiling(
            text_model=text_model, input_tokens=input_ceiling, output_tokens=output_limit
        ),
        token_ceiling=input_ceiling + output_limit,
    )


def _routes(
    *,
    parsed: TextBody,
    resolved: ResolvedTextModel,
    family: Family,
    translated_from: dict[str, Any],
    headers: dict[str, str],
    request_id: str,
    output_limit: int,
) -> dict[str, Route]:
    """A route per kind among the model's upstreams (a failover may cross kinds, each attempt sent its
    kind's body); a native one when the model has no upstream. What some kind's API cannot express is
    the caller's 400, as the call could land there. A translated route is made from `translated_from`
    (a Responses call's body goes on from what the gateway kept: chat/response_store.py). A kind
    that takes no image by link (Gemini) is translated from a copy of the body with its image links
    downloaded (chat/image_links.py), once for the call, before anything is reserved; the other kinds
    are sent the links."""
    translations = resolved.translations or {"": Translation(upstream_family=family, translator=None)}
    routes = {}
    inlined: list[dict[str, Any]] = []  # the body with its image links made bytes, made once if needed
    for kind, translation in translations.items():
        translator = translator_make(
            translation=translation,
            call=TranslatedCall(
                model=resolved.text_model.model_id,
                upstream_model=resolved.text_model.upstream_model_name,
                upstream_kind=kind,
                max_tokens=output_limit,
                created=int(time.time()),
            ),
        )
        if translator is None:
            body = _forward_body(parsed=parsed, resolved=resolved, family=family)
            sent = parsed.body
        else:
            given = translated_from
            if not translation.upstream_family.takes_image_links:
                if not inlined:
                    inlined.append(image_links_inlined(body=given, family=family))
                given = inlined[0]
            sent = _translated_body(translator=translator, body=given)
            body = json_bytes(sent)
        request = TextRequest(
            operation=translation.upstream_family.operation,
            body=body,
            stream=parsed.stream,
            headers=headers if translator is None else {},
            request_id=request_id,
            model=resolved.text_model.upstream_model_name,
        )
        routes[kind] = Route(
            upstream_family=translation.upstream_family, translator=translator, request=request, sent=sent
        )
    return routes


def _forward_body(*, parsed: TextBody, resolved: ResolvedTextModel, family: Family) -> bytes:
    body = dict(parsed.body)
    body["model"] = resolved.text_model.upstream_model_name
    if parsed.stream and family is CHAT:
        options = body.get("stream_options")
        body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _translated_body(*, translator: Translator, body: dict[str, Any]) -> dict[str, Any]:
    """The body the upstream reads; what its family cannot express is the caller's 400."""
    try:
        return translator.request_body(body)
    except TranslationRefused as refused:
        raise InvalidRequest(
            f"{refused.param}: {refused.message} (This model is served by a provider that speaks "
            "another API.)",
            param=refused.param,
        ) from None


def _counted_locally(*, body: dict[str, Any], resolved: ResolvedTextModel) -> StoredResponse:
    """A Messages body's input tokens, counted here for a model whose upstream cannot count them."""
    try:
        tokens = messages_input_tokens(body=body, upstream_model=resolved.text_model.upstream_model_name)
    except TranslationRefused as refused:
        raise InvalidRequest(f"{refused.param}: {refused.message}", param=refused.param) from None
    return StoredResponse(
        status=200,
        body=json.dumps({"input_tokens": tokens}).encode("utf-8"),
        content_type="application/json",
        headers={},
    )


def _usage_asked(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _call(
    *, usage: UsageScope, resolved: ResolvedTextModel, routes: dict[str, Route]
) -> tuple[TextReply, Route, UpstreamSnapshot]:
    """One non-streamed call through the model's upstreams with retries and failover, each sent its
    kind's body: the upstream's success, or its 4xx about the request (passed through), read whole,
    with the route it went by."""

    def attempt(upstream: UpstreamSnapshot, deadline: float) -> TextReply:
        request = routes[upstream.kind].request
        return adapter_for(upstream, deadline=deadline).call(request.operation, request)

    reply, upstream = upstream_attempts_run(
        usage=usage,
        upstreams=resolved.upstreams,
        attempt=attempt,
        request_id=usage.request_id,
        affinity=resolved.affinity,
    )
    return reply, routes[upstream.kind], upstream


def _answer(reply: TextReply, route: Route, upstream: UpstreamSnapshot, *, family: Family) -> StoredResponse:
    """The upstream's answer for the caller: its success as it came (or translated into the caller's
    family), or its refusal passed through."""
    translator = route.translator
    if not 200 <= reply.status < 300:
        raise refusal_for_caller(reply=reply, upstream=upstream, translator=translator, family=family)
    if translator is None:
        return StoredResponse(
            status=reply.status,
            body=reply.body,
            content_type=reply.content_type or "application/json",
            headers={},
        )
    translated = translator.response_body(_json_object(reply.body))
    return StoredResponse(
        status=reply.status,
        body=json_bytes(translated),
        content_type="application/json",
        headers={},
    )


def _json_object(body: bytes) -> dict[str, Any]:
    """A successful answer's body as the JSON object every text API answers; anything else is the
    upstream's failure."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise UpstreamFailed(
            "The model's provider answered without a valid JSON body.", code="upstream_error"
        )
    return payload


def _produce(
    *,
    usage: UsageScope,
    credential: Credential,
    resolved: ResolvedTextModel,
    family: Family,
    priced: PricedRoutes,
    thread: ResponseThread | None,
) -> StoredResponse:
    """Limits, the hold for the ceiling, the upstream call, and the capture of the exact cost of the
    usage the upstream reported. A translated Responses answer is kept in its `thread` (before the
    charge: a call that cannot keep it is not charged)."""
    answered: list[Route] = []  # the route of the attempt that answered

    def call() -> StoredResponse:
        reply, route, upstream = _call(usage=usage, resolved=resolved, routes=priced.routes)
        answered.append(route)
        answer = _answer(reply, route, upstream, family=family)
        if thread is not None and route.translator is not None:
            response_keep(thread=thread, answer=route.translator.responses_answer)
        return answer

    def charge(answer: StoredResponse) -> Decimal | None:
        payload = _json_object(answer.body)
        translator = answered[-1].translator if answered else None
        if translator is not None:
            # The usage as the upstream reported it, every bucket kept: the caller's family may have
            # no field for some (Chat Completions has none for cache writes).
            seen = translator.tokens
            tokens = None if seen is None else translated_tokens_billed(seen)
        else:
            tokens = family.tokens_of(payload)
        return tokens_charge(usage=usage, resolved=resolved, tokens=tokens)

    return metered_call(
        usage=usage,
        credential=credential,
        group=resolved.group,
        model_id=resolved.text_model.model_id,
        price=priced.ceiling,
        call=call,
        charge=charge,
        tokens=priced.token_ceiling,
    )
