"""The built-in `demo` upstream: real images made offline with Pillow, and text answers in every text
family's shape (`demo_text`), so the gateway does its whole job (auth, billing, validation, both
response formats, streaming) with no network and no provider key.

Each image is the requested size and format, coloured from the prompt, and shows the prompt's text;
an edit draws the prompt over the source image, tinting the region the mask leaves transparent.
"""

from __future__ import annotations

import base64
import hashlib
import io
import textwrap
import time
from collections.abc import Iterator

from PIL import Image, ImageDraw, ImageFilter, ImageFont

from upstreams.providers.base import (
    IMAGES_EDIT,
    IMAGES_GENERATE,
    IMAGES_STREAM,
    TEXT_OPERATIONS,
    Adapter,
    ImageItem,
    ImageRequest,
    ImageResult,
    StreamEvent,
    TextReply,
    TextRequest,
    UpstreamError,
    stream_event_names,
)
from upstreams.providers.demo_text import demo_text_reply

DEFAULT_SIZE = (1024, 1024)
MAX_SIDE = 4096
PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}


def _parse_size(size: str | None) -> tuple[int, int]:
    if not size or size == "auto":
        return DEFAULT_SIZE
    width, _, height = size.partition("x")
    try:
        w, h = int(width), int(height)
    except ValueError:
        raise UpstreamError(f"demo upstream cannot make size {size!r}", status=400, retryable=False) from None
    if not (1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE):
        raise UpstreamError(f"demo upstream cannot make size {size!r}", status=400, retryable=False)
    return w, h


def _colour(prompt: str, index: int) -> tuple[int, int, int]:
    digest = hashlib.sha256(f"{index}:{prompt}".encode()).digest()
    # Keep colours mid-dark so white text stays readable.
    return (40 + digest[0] % 140, 40 + digest[1] % 140, 40 + digest[2] % 140)


def _draw_caption(image: Image.Image, prompt: str, index: int, n: int) -> None:
    width, height = image.size
    draw = ImageDraw.Draw(image)
    font_size = max(10, min(width, height) // 18)
    font = ImageFont.load_default(size=font_size)
    chars_per_line = max(8, int(width / (font_size * 0.55)))
    lines = textwrap.wrap(prompt, width=chars_per_line)[: max(1, (height // (font_size + 6)) - 2)]
    label = f"demo {index + 1}/{n}"
    y = font_size // 2
    for line in [label, *lines]:
        draw.text((font_size // 2 + 2, y + 2), line, font=font, fill=(0, 0, 0))
        draw.text((font_size // 2, y), line, font=font, fill=(255, 255, 255))
        y += font_size + 6


def _encode(image: Image.Image, output_format: str, compression: int | None) -> bytes:
    fmt = PIL_FORMATS.get(output_format)
    if fmt is None:
        raise UpstreamError(f"demo upstream cannot write {output_format!r}", status=400, retryable=False)
    buffer = io.BytesIO()
    if fmt == "PNG":
        image.save(buffer, fmt, compress_level=1)  # fast: the demo is about the pipeline, not file size
    else:
        # OpenAI's output_compression is 0-100 with 100 = least compression (best quality).
        quality = 90 if compression is None else max(1, min(100, compression))
        image.convert("RGB").save(buffer, fmt, quality=quality)
    return buffer.getvalue()


class DemoAdapter(Adapter):
    kind = "demo"
    operations = frozenset({IMAGES_GENERATE, IMAGES_EDIT, IMAGES_STREAM, *TEXT_OPERATIONS})

    def serve(self, operation: str, request: TextRequest) -> TextReply:
        """Any text operation, answered offline."""
        self.operation_check(operation)
        return demo_text_reply(operation, request)

    def generate(self, request: ImageRequest) -> ImageResult:
        size = _parse_size(request.size)
        transparent = request.options.get("background") == "transparent"
        items = []
        for index in range(request.n):
            if transparent:
                image = Image.new("RGBA", size, (0, 0, 0, 0))
            else:
                image = Image.new("RGB", size, _colour(request.prompt, index))
            _draw_caption(image, request.prompt, index, request.n)
            items.append(self._item(image, request))
        return ImageResult(created=int(time.time()), items=tuple(items))

    def edit(self, request: ImageRequest) -> ImageResult:
        if not request.images:
            raise UpstreamError("demo upstream needs an image to edit", status=400, retryable=False)
        with Image.open(io.BytesIO(request.images[0])) as opened:
            source = opened.convert("RGBA")
        size = _parse_size(request.size) if request.size else source.size
        source = source.resize(size)
        tint = Image.new("RGBA", size, (*_colour(request.prompt, 0), 160))
        if request.mask is not None:
            with Image.open(io.BytesIO(request.mask)) as opened_mask:
                alpha = opened_mask.convert("RGBA").resize(size).getchannel("A")
            # The mask's transparent region is the part replaced: tint where alpha is 0.
            region = alpha.point(lambda a: 255 if a == 0 else 0)
        else:
            region = Image.new("L", size, 255)
        items = []
        for index in range(request.n):
            image = source.copy()
            image.paste(tint, (0, 0), region)
            _draw_caption(image, request.prompt, index, request.n)
            items.append(self._item(image, request))
        return ImageResult(created=int(time.time()), items=tuple(items))

    def stream(self, request: ImageRequest) -> Iterator[StreamEvent]:
        """Blurry partial images (as many as `partial_images` asks), then each finished image."""
        partial_type, completed_type = stream_event_names(request.operation)
        result = self.generate(request) if request.operation == "generate" else self.edit(request)
        partials = int(request.options.get("partial_images") or 0)
        output_format = request.output_format or "png"
        for index, item in enumerate(result.items):
            with Image.open(io.BytesIO(base64.b64decode(item.b64_json or ""))) as finished:
                finished.load()
                for step in range(partials):
                    blurred = finished.filter(ImageFilter.GaussianBlur(radius=24 // (step + 1)))
                    data = _encode(blurred, output_format, request.options.get("output_compression"))
                    yield StreamEvent(
                        type=partial_type,
                        data={
                            "type": partial_type,
                            "b64_json": base64.b64encode(data).decode("ascii"),
                            "partial_image_index": step,
                            "image_index": index,
                            "created_at": result.created,
                            "output_format": output_format,
                        },
                    )
            yield StreamEvent(
                type=completed_type,
                data={
                    "type": completed_type,
                    "b64_json": item.b64_json,
                    "image_index": index,
                    "created_at": result.created,
                    "output_format": output_format,
                    "revised_prompt": item.revised_prompt,
                },
                final=True,
            )

    @staticmethod
    def _item(image: Image.Image, request: ImageRequest) -> ImageItem:
        data = _encode(image, request.output_format or "png", request.options.get("output_compression"))
        return ImageItem(b64_json=base64.b64encode(data).decode("ascii"), revised_prompt=request.prompt)
