"""The billed image call: resolve → validate → idempotency → limits + reserve → decode uploads →
upstream → capture → render.

Each step is a service owned by its app; this module only puts them in order, so the views stay thin
and every billed endpoint runs the same sequence (docs/architecture.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any, Literal

from django.core.files.uploadedfile import UploadedFile
from django.http import HttpResponse, StreamingHttpResponse
from django.utils.datastructures import MultiValueDict
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
from api.metering import metered_begin, metered_call, reservation_precheck
from api.upstream_call import upstream_attempts_run
from api.upstream_errors import upstream_error_to_api_error
from api.usage import UsageScope, usage_scope
from core.metrics import stream_counted
from core.offload import cpu_bound
from images.access import ResolvedModel, image_model_resolve
from images.results import result_body, result_render
from images.streaming import StreamedCall, stream_relay
from images.uploads import EditUploads, edit_uploads_decode
from images.validation import ImageParams, edit_fields_validate, generation_params_validate
from keys.credentials import Credential
from upstreams.providers import adapter_for
from upstreams.providers.base import ImageRequest, ImageResult, UpstreamError
from upstreams.routing import upstreams_for_model
from upstreams.snapshots import UpstreamSnapshot

Operation = Literal["generate", "edit"]
ENDPOINTS: dict[Operation, str] = {"generate": "images.generations", "edit": "images.edits"}


def image_call_handle(*, request: Request, operation: Operation) -> HttpResponse | StreamingHttpResponse:
    """The /v1/images/* views: run the call for the authenticated request and answer it."""
    stored = image_call_run(
        credential=request.auth,
        operation=operation,
        data=request.data,
        files=request.FILES if operation == "edit" else None,
        request_id=request.request_id,
        idempotency_key=request.META.get("HTTP_IDEMPOTENCY_KEY"),
        path=request.path,
    )
    if isinstance(stored, StreamedCall):
        return event_stream_response(stored.events)
    return stored_response(stored)


def image_generation_answer(
    *,
    credential: Credential,
    data: dict[str, Any],
    request_id: str,
    idempotency_key: str | None = None,
    path: str = "",
) -> CallAnswer:
    """One billed generation, not streamed, its answer as data for a caller that shows it (the
    console's playground); raises ApiError on any refusal or failure, as image_call_run does. `data`
    does not ask for a stream (a stream has no answer to return)."""
    stored = image_call_run(
        credential=credential,
        operation="generate",
        data=data,
        files=None,
        request_id=request_id,
        idempotency_key=idempotency_key,
        path=path,
    )
    assert isinstance(stored, StoredResponse), "a generation asking for a stream has no answer as data"
    return call_answer(stored)


def image_call_run(
    *,
    credential: Credential,
    operation: Operation,
    data: Any,
    files: MultiValueDict | None,
    request_id: str,
    idempotency_key: str | None = None,
    path: str = "",
) -> StoredResponse | StreamedCall:
    """One billed image call for a verified credential; raises ApiError on any refusal or failure.

    `data` is the parsed JSON body (generate) or the form fields (edit); `files` the uploads (edit).
    The console's playground calls this too, so its calls are billed exactly like API calls. With
    `stream: true` the answer is a StreamedCall (images/streaming.py), which then owns the usage
    scope and the reservation until the stream ends.
    """
    with ExitStack() as stack:
        usage = stack.enter_context(
            usage_scope(request_id=request_id, endpoint=ENDPOINTS[operation], credential=credential)
        )
        requested_model = data.get("model") if hasattr(data, "get") else None
        usage.set_requested_model(requested_model)
        resolved = image_model_resolve(
            credential=credential, requested_model=requested_model, operation=operation
        )
        usage.set_target(group=resolved.group, model_id=resolved.image_model.model_id)
        uploads: EditUploads | None = None
        if operation == "generate":
            params = generation_params_validate(body=data, image_model=resolved.image_model)
        else:
            params, uploads = edit_fields_validate(
                data=data, files=files or MultiValueDict(), image_model=resolved.image_model
            )
            # Decoding the uploads is the expensive step of an edit (16 images of 16 megapixels take
            # seconds of CPU): every cheap refusal comes first. This one costs a read; the limits and
            # the reservation run before decoding too (metered_begin, then `upstream_request`).
            reservation_precheck(
                credential=credential, group=resolved.group, price=resolved.image_model.price
            )

        def upstream_request() -> ImageRequest:
            images, mask = cpu_bound(edit_uploads_decode, uploads=uploads) if uploads else ((), None)
            return _upstream_request(
                operation=operation,
                resolved=resolved,
                params=params,
                images=images,
                mask=mask,
                request_id=request_id,
            )

        if params.options.get("stream"):
            if idempotency_key is not None:
                raise stream_idempotency_refused()
            meter = metered_begin(
                usage=usage,
                credential=credential,
                group=resolved.group,
                model_id=resolved.image_model.model_id,
                price=resolved.image_model.price,
            )
            stack.callback(meter.close)
            prepared = upstream_request()  # an undecodable upload releases the reservation
            owned = stack.pop_all()  # from here the stream owns the usage scope and the reservation
            return StreamedCall(
                events=stream_counted(
                    stream_relay(
                        owned=owned,
                        usage=usage,
                        meter=meter,
                        resolved=resolved,
                        upstream_request=prepared,
                    ),
                    endpoint=usage.endpoint,
                )
            )
        return idempotent_answer(
            account=credential.account,
            key=idempotency_key,
            reference=request_id,
            # Only a keyed request is compared with the one that claimed its key: without a key, neither
            # the body nor the uploaded files (megabytes for an edit) are hashed.
            fingerprint=(
                request_fingerprint(path=path, group_id=resolved.group.pk, content=_content(data, files))
                if idempotency_key is not None
                else ""
            ),
            produce=lambda: _produce(
                usage=usage,
                credential=credential,
                resolved=resolved,
                upstream_request=upstream_request,
                params=params,
            ),
        )


def _upstream_request(
    *,
    operation: Operation,
    resolved: ResolvedModel,
    params: ImageParams,
    images: tuple[bytes, ...],
    mask: bytes | None,
    request_id: str,
) -> ImageRequest:
    return ImageRequest(
        operation=operation,
        upstream_model=resolved.image_model.upstream_model_name,
        prompt=params.prompt,
        n=params.n,
        size=params.size,
        output_format=params.output_format,
        response_format=params.response_format,
        options=dict(params.options),
        images=images,
        mask=mask,
        request_id=request_id,
    )


def _produce(
    *,
    usage: UsageScope,
    credential: Credential,
    resolved: ResolvedModel,
    upstream_request: Callable[[], ImageRequest],
    params: ImageParams,
) -> StoredResponse:
    """Limits, reserve, decode the uploads, upstream call and capture; the rendered body is part of
    the billed call, so a result that cannot be delivered (e.g. its URL cannot be fetched) is
    released, not charged, and so is an upload that turns out not to be an image."""

    def call() -> bytes:
        return _call_upstream(
            usage=usage, resolved=resolved, upstream_request=upstream_request(), params=params
        )

    body = metered_call(
        usage=usage,
        credential=credential,
        group=resolved.group,
        model_id=resolved.image_model.model_id,
        price=resolved.image_model.price,
        call=call,
    )
    return StoredResponse(status=200, body=body, content_type="application/json", headers={})


def _call_upstream(
    *, usage: UsageScope, resolved: ResolvedModel, upstream_request: ImageRequest, params: ImageParams
) -> bytes:
    """Call the model's upstreams with retries and failover, then render the answer for the caller."""

    def attempt(upstream: UpstreamSnapshot, deadline: float) -> ImageResult:
        return adapter_for(upstream, deadline=deadline).image_call(upstream_request)

    result, upstream = upstream_attempts_run(
        usage=usage,
        upstreams=upstreams_for_model(
            model_label=resolved.image_model.model_label, model_pk=resolved.image_model.pk
        ),
        attempt=attempt,
        request_id=upstream_request.request_id,
    )
    try:
        # Not retried elsewhere: the upstream already made (and billed) these images.
        rendered = result_render(
            result=result,
            response_format=params.response_format,
            upstream=upstream,
            output_format=params.output_format,
        )
    except UpstreamError as exc:
        raise upstream_error_to_api_error(error=exc, upstream=upstream) from exc
    # The upstream's copies of the images go before the body is built around the rendered ones, so a
    # large image is held at most twice at any moment (bench/memory_large.py measures it).
    del result
    return result_body(rendered=rendered)


def _content(data: Any, files: MultiValueDict | None) -> Iterator[bytes]:
    """An image request's content for its fingerprint, as parts: the JSON body; or every form field
    (its name, then its value), then every file (its name, then its bytes' SHA-256, read from the
    start; images/uploads.py rewinds an upload before it reads it)."""
    if not hasattr(data, "getlist"):  # a JSON body
        yield json.dumps(data, sort_keys=True, default=str).encode()
    else:
        for key in sorted(data.keys()):
            for value in data.getlist(key):
                if not isinstance(value, UploadedFile):
                    yield from (b"field", key.encode(), str(value).encode())
    for key in sorted(files.keys()) if files else ():
        for upload in files.getlist(key):
            upload.seek(0)
            yield from (b"file", key.encode(), hashlib.file_digest(upload, "sha256").digest())
