"""The `openai` upstream kind: OpenAI's API and compatible providers (xAI, relays, ...).

Images: generation is POST {base_url}/images/generations (JSON), edits POST {base_url}/images/edits
(multipart). Only the validated spec fields are sent, with `model` renamed to the upstream's model name
and the provider key from the environment variable the upstream names.

Text: chat completions are POST {base_url}/chat/completions and responses POST {base_url}/responses,
the endpoint app's body sent as it is (`Adapter._text_exchange` reads the answer).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.utils import timezone

from upstreams.imageformats import CONTENT_TYPES, image_format_sniff
from upstreams.providers.base import (
    CHAT_COMPLETIONS,
    EVENT_STREAM,
    IMAGES_EDIT,
    IMAGES_GENERATE,
    IMAGES_STREAM,
    RESPONSES,
    USER_AGENT,
    Adapter,
    ImageItem,
    ImageRequest,
    ImageResult,
    StreamEvent,
    TextReply,
    TextRequest,
    UpstreamError,
    reply_error,
    stream_event_names,
)
from upstreams.sse import sse_events
from upstreams.transport import UpstreamReply

# GPT image models always answer base64 and refuse `response_format` ("Unknown parameter").
NO_RESPONSE_FORMAT_PREFIXES = ("gpt-image",)
# Sent only on the streaming path (`stream()`), never with a plain JSON call.
STREAM_OPTIONS = ("stream", "partial_images")


class OpenAIAdapter(Adapter):
    kind = "openai"
    operations = frozenset({IMAGES_GENERATE, IMAGES_EDIT, IMAGES_STREAM, CHAT_COMPLETIONS, RESPONSES})
    TEXT_PATHS = {CHAT_COMPLETIONS: "chat/completions", RESPONSES: "responses"}

    def serve(self, operation: str, request: TextRequest) -> TextReply:
        """A chat completion or a response, streamed or not, with the body the endpoint app made."""
        self.operation_check(operation)
        headers = {
            **self._headers(),
            "Content-Type": "application/json",
            "Accept": EVENT_STREAM if request.stream else "application/json",
        }
        return self._text_exchange(self._url(self.TEXT_PATHS[operation]), request, headers=headers)

    def generate(self, request: ImageRequest) -> ImageResult:
        response = self._request(
            "POST",
            self._url("images/generations"),
            json=self._fields(request),
            headers=self._headers(),
        )
        return self._result(response)

    def edit(self, request: ImageRequest) -> ImageResult:
        if not request.images:
            raise UpstreamError("an edit needs at least one image", status=None, retryable=False)
        fields = {name: _form_text(value) for name, value in self._fields(request).items()}
        image_field = "image" if len(request.images) == 1 else "image[]"
        files = [
            (image_field, _file_part(f"image-{index}", data)) for index, data in enumerate(request.images)
        ]
        if request.mask is not None:
            files.append(("mask", _file_part("mask", request.mask)))
        response = self._request(
            "POST", self._url("images/edits"), data=fields, files=files, headers=self._headers()
        )
        return self._result(response)

    def stream(self, request: ImageRequest) -> Iterator[StreamEvent]:
        """Ask the upstream for server-sent events and relay them as they arrive."""
        _, completed_type = stream_event_names(request.operation)
        fields = self._fields(request)
        fields["stream"] = True
        if request.options.get("partial_images") is not None:
            fields["partial_images"] = request.options["partial_images"]
        headers = {**self._headers(), "Accept": "text/event-stream"}
        if request.operation == "generate":
            response = self._request(
                "POST", self._url("images/generations"), json=fields, headers=headers, stream=True
            )
        else:
            files = [
                ("image" if len(request.images) == 1 else "image[]", _file_part(f"image-{i}", data))
                for i, data in enumerate(request.images)
            ]
            if request.mask is not None:
                files.append(("mask", _file_part("mask", request.mask)))
            form = {name: _form_text(value) for name, value in fields.items()}
            response = self._request(
                "POST", self._url("images/edits"), data=form, files=files, headers=headers, stream=True
            )
        try:
            if not 200 <= response.status < 300:
                response.read()
                self._result(response)  # raises the typed error for the status
            if EVENT_STREAM not in response.headers.get("Content-Type", "").lower():
                raise UpstreamError(
                    "upstream did not answer with an event stream", status=502, retryable=True, sent=True
                )
            yield from _image_events(response, completed_type=completed_type)
        finally:
            response.close()

    # --- building the request ---------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self._api_key()}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }

    def _fields(self, request: ImageRequest) -> dict[str, Any]:
        """Only the spec's fields, each only when set; `model` is the upstream's name for the model."""
        fields: dict[str, Any] = {"model": request.upstream_model, "prompt": request.prompt, "n": request.n}
        if request.size is not None:
            fields["size"] = request.size
        if request.output_format is not None:
            fields["output_format"] = request.output_format
        if not request.upstream_model.startswith(NO_RESPONSE_FORMAT_PREFIXES):
            fields["response_format"] = request.response_format
        for name, value in request.options.items():
            if name not in STREAM_OPTIONS:
                fields[name] = value
        return fields

    # --- reading the answer -----------------------------------------------------------------------

    def _result(self, response: UpstreamReply) -> ImageResult:
        status = response.status
        if 200 <= status < 300:
            return self._success(response)
        raise reply_error(response)

    def _success(self, response: UpstreamReply) -> ImageResult:
        content_type = response.headers.get("Content-Type", "")
        try:
            # The parsed answer holds the images; the response's bytes of them are dropped.
            payload = response.json_take() if "json" in content_type.lower() else None
        except ValueError:
            payload = None
        items = payload.get("data") if isinstance(payload, dict) else None
        if (
            not isinstance(payload, dict)
            or not isinstance(items, list)
            or not items
            or not all(_valid_item(item) for item in items)
        ):
            raise UpstreamError(
                f"upstream answered HTTP {response.status} without a valid image list "
                f"(Content-Type {content_type or 'missing'})",
                status=502,
                retryable=True,
                sent=True,
            )
        created = payload.get("created")
        if not isinstance(created, int) or isinstance(created, bool):
            created = int(timezone.now().timestamp())
        usage = payload.get("usage")
        return ImageResult(
            created=created,
            items=tuple(
                ImageItem(
                    b64_json=item.get("b64_json") or None,
                    url=item.get("url") or None,
                    revised_prompt=item.get("revised_prompt") or None,
                )
                for item in items
            ),
            usage=usage if isinstance(usage, dict) else None,
        )


def _valid_item(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    fields = [item.get("b64_json"), item.get("url")]
    if not any(isinstance(value, str) and value for value in fields):
        return False
    return all(value is None or isinstance(value, str) for value in [*fields, item.get("revised_prompt")])


def _form_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _file_part(stem: str, data: bytes) -> tuple[str, bytes, str]:
    """A multipart file part whose name and type follow its bytes (the caller's file name is not sent)."""
    fmt = image_format_sniff(data=data) or "png"
    return (f"{stem}.{fmt}", data, CONTENT_TYPES[fmt])


def _image_events(response: UpstreamReply, *, completed_type: str) -> Iterator[StreamEvent]:
    """The image events of an event stream; a stream cut before its end is an error whose outcome is
    unknown (the upstream may still finish, and bill, the image)."""
    for sse in sse_events(response):
        if sse.data == "[DONE]":
            return
        try:
            data = json.loads(sse.data)
        except ValueError:
            raise UpstreamError(
                "upstream sent an event that is not JSON",
                status=502,
                retryable=False,
                outcome_unknown=True,
            ) from None
        kind = sse.event or (data.get("type") if isinstance(data, dict) else "") or ""
        del sse  # the event's text; only the parsed event is kept
        if kind == "error" or (isinstance(data, dict) and "error" in data and not kind.startswith("image_")):
            raise UpstreamError(
                "upstream reported an error mid-stream",
                status=502,
                retryable=False,
                body=data,
                outcome_unknown=True,
            )
        if isinstance(data, dict):
            yield StreamEvent(type=kind, data=data, final=kind == completed_type)
