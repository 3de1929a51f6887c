"""The `gemini` upstream kind: Google's generateContent API, for image output and for text.

`POST {base_url}/models/{upstream_model}:generateContent`, key in `x-goog-api-key`. The requested
size becomes the nearest aspect ratio the API accepts; an edit sends the source image (and the mask,
as a second image with an instruction) as inline data. The answer's inline image parts become
`b64_json` items and its text part the `revised_prompt`. One generateContent call makes one image,
so `n` images are `n` calls. Errors come in Google's shape {"error": {"code", "message", "status"}}.

Text (`gemini.generate_content`, reached through the translators of chat/translation.py): the body
the translator made, as it is, to `:generateContent`, or `:streamGenerateContent?alt=sse` for a
stream, whose events are generateContent answers, the last one with the finish reason and the usage.
"""

from __future__ import annotations

import base64
import io
import os
import time
from typing import Any

from PIL import Image

from upstreams.errors import UpstreamMisconfigured
from upstreams.providers.base import (
    EVENT_STREAM,
    GEMINI_COUNT_TOKENS,
    GEMINI_GENERATE,
    IMAGES_EDIT,
    IMAGES_GENERATE,
    USER_AGENT,
    Adapter,
    ImageItem,
    ImageRequest,
    ImageResult,
    TextReply,
    TextRequest,
    UpstreamError,
    reply_retry_after,
)

ASPECT_RATIOS = ("1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9")
MIME_FOR_FORMAT = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
PIL_FOR_MIME = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}
MASK_INSTRUCTION = (
    "The last image is a mask: change only the region where the mask is transparent and keep the "
    "rest of the first image as it is."
)


def aspect_ratio_for(size: str | None) -> str | None:
    """The accepted aspect ratio nearest to `WxH` (by ratio), or None for no preference."""
    if not size or size == "auto":
        return None
    width, _, height = size.partition("x")
    wanted = int(width) / int(height)

    def distance(ratio: str) -> float:
        w, h = ratio.split(":")
        return abs(int(w) / int(h) - wanted)

    return min(ASPECT_RATIOS, key=distance)


def _sniff_mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"


class GeminiAdapter(Adapter):
    kind = "gemini"
    operations = frozenset({IMAGES_GENERATE, IMAGES_EDIT, GEMINI_GENERATE, GEMINI_COUNT_TOKENS})

    def serve(self, operation: str, request: TextRequest) -> TextReply:
        """A text call's generateContent, streamed or not, or its countTokens, with the body the
        translator made."""
        self.operation_check(operation)
        if operation == GEMINI_COUNT_TOKENS:
            action = "countTokens"
        else:
            action = "streamGenerateContent?alt=sse" if request.stream else "generateContent"
        headers = {
            "x-goog-api-key": self._api_key(),
            "Content-Type": "application/json",
            "Accept": EVENT_STREAM if request.stream else "application/json",
            "User-Agent": USER_AGENT,
        }
        return self._text_exchange(self._url(f"models/{request.model}:{action}"), request, headers=headers)

    def generate(self, request: ImageRequest) -> ImageResult:
        return self._run(request, [{"text": request.prompt}])

    def edit(self, request: ImageRequest) -> ImageResult:
        parts: list[dict[str, Any]] = [{"text": request.prompt}]
        parts += [self._inline(image) for image in request.images]
        if request.mask is not None:
            parts.append(self._inline(request.mask))
            parts.append({"text": MASK_INSTRUCTION})
        return self._run(request, parts)

    @staticmethod
    def _inline(data: bytes) -> dict[str, Any]:
        return {"inlineData": {"mimeType": _sniff_mime(data), "data": base64.b64encode(data).decode("ascii")}}

    def _run(self, request: ImageRequest, parts: list[dict[str, Any]]) -> ImageResult:
        generation_config: dict[str, Any] = {"responseModalities": ["TEXT", "IMAGE"]}
        ratio = aspect_ratio_for(request.size)
        if ratio:
            generation_config["imageConfig"] = {"aspectRatio": ratio}
        payload = {"contents": [{"role": "user", "parts": parts}], "generationConfig": generation_config}
        items: list[ImageItem] = []
        usage: dict[str, int] = {}
        for _ in range(request.n):
            answer = self._call(request.upstream_model, payload)
            items.extend(self._items(answer, request.output_format))
            reported = answer.get("usageMetadata")
            for key, value in reported.items() if isinstance(reported, dict) else ():
                if isinstance(value, int) and not isinstance(value, bool):
                    usage[key] = usage.get(key, 0) + value
        if not items:
            raise UpstreamError("the upstream answered without an image", status=502, retryable=True)
        return ImageResult(created=int(time.time()), items=tuple(items), usage=usage or None)

    def _call(self, model: str, payload: dict[str, Any]) -> dict[str, Any]:
        key = os.environ.get(self.upstream.api_key_env or "", "")
        if not key:
            raise UpstreamMisconfigured(
                f"the environment variable {self.upstream.api_key_env or '(none)'} named by upstream "
                f"{self.upstream.name!r} holds no API key"
            )
        url = f"{self.upstream.base_url.rstrip('/')}/models/{model}:generateContent"
        reply = self._request("POST", url, json=payload, headers={"x-goog-api-key": key})
        try:
            body = reply.json_take()  # the parsed answer holds the images, not the bytes
        except ValueError:
            body = None
        if reply.status != 200:
            raise UpstreamError(
                _error_message(body) or f"upstream answered HTTP {reply.status}",
                status=reply.status,
                retryable=reply.status in (429, 500, 502, 503, 504),
                body=body if isinstance(body, dict) and "error" in body else None,
                retry_after=reply_retry_after(reply),
            )
        if not isinstance(body, dict):
            raise UpstreamError(
                "the upstream answered with something that is not JSON", status=502, retryable=True
            )
        return body

    @staticmethod
    def _items(answer: dict[str, Any], output_format: str | None) -> list[ImageItem]:
        """The images of an answer's candidates, each with the candidates' text as its revised
        prompt. A part or field of another type than the API's is skipped, as absent."""
        items: list[ImageItem] = []
        for candidate in _dicts(answer.get("candidates")):
            content = candidate.get("content")
            parts = _dicts(content.get("parts") if isinstance(content, dict) else None)
            text = " ".join(p["text"] for p in parts if isinstance(p.get("text"), str)).strip() or None
            for part in parts:
                inline = part.get("inlineData") or part.get("inline_data")
                if not isinstance(inline, dict):
                    continue
                data = inline.get("data")
                if not isinstance(data, str) or not data:
                    continue
                mime = inline.get("mimeType") or inline.get("mime_type") or "image/png"
                wanted = MIME_FOR_FORMAT.get(output_format or "")
                if wanted and wanted != mime:
                    data = _reencode(data, wanted)
                items.append(ImageItem(b64_json=data, revised_prompt=text))
        return items


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list; none for anything that is not a list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _reencode(b64_data: str, mime: str) -> str:
    """Convert the upstream's image to the caller's output format."""
    try:
        with Image.open(io.BytesIO(base64.b64decode(b64_data))) as image:
            image.load()
            converted = image.convert("RGB") if mime == "image/jpeg" else image
            buffer = io.BytesIO()
            converted.save(buffer, PIL_FOR_MIME[mime])
    except (OSError, ValueError) as exc:
        raise UpstreamError("the upstream's image could not be decoded", status=502, retryable=True) from exc
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _error_message(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
        return message if isinstance(message, str) else None
    return None
