"""The response body of both image endpoints, converting between `url` and `b64_json` as asked.

| upstream gave | caller asked | answer                                                               |
|---------------|--------------|----------------------------------------------------------------------|
| b64_json      | b64_json     | the base64 as given (strict base64 whose first bytes are a PNG, JPEG |
|               |              | or WebP signature; a `data:` URL prefix is removed)                  |
| b64_json      | url          | stored by the gateway, a signed expiring URL under GATEWAY_PUBLIC_URL |
| url           | b64_json     | downloaded from the upstream's own host and encoded                  |
| url           | url          | the upstream's URL, or re-hosted when the upstream is on a private   |
|               |              | address (its links would be unreachable and would reveal internals)  |

Failures are `UpstreamError`s (the upstream's answer could not be delivered), so the pipeline maps them
like any other upstream failure and the call is not charged.

`result_render` checks and converts; `result_body` writes the JSON as bytes around each image's base64,
which is never decoded whole (unless it is stored for a URL) nor copied into a str and encoded again.
With the pipeline dropping the upstream's result once rendered, a large image is held at most twice at
any moment (bench/memory_large.py measures it).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from images.hosting import hosted_image_store, image_fetch, upstream_is_private
from upstreams.errors import UpstreamError
from upstreams.imageformats import CONTENT_TYPES, image_format_sniff
from upstreams.providers.base import ImageItem, ImageResult

if TYPE_CHECKING:
    from upstreams.snapshots import UpstreamSnapshot

logger = logging.getLogger("gateway.images")

# Some compatible providers answer a data URL instead of bare base64.
_DATA_URL_PREFIX = re.compile(r"data:image/[a-z0-9.+-]+;base64,", re.IGNORECASE)
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# The alphabet is checked in slices of this many characters (a small temporary copy each).
_BASE64_CHECK_CHARS = 64 * 1024
# Characters decoded to read the image's format: 48 bytes, more than any signature needs.
_BASE64_HEAD_CHARS = 64


@dataclass(frozen=True)
class RenderedImage:
    """One item of the answer. `b64_json` is checked base64 as ASCII bytes: it goes into the JSON body
    as it is (its alphabet needs no escaping)."""

    b64_json: bytes | None = None
    url: str | None = None
    revised_prompt: str | None = None


@dataclass(frozen=True)
class RenderedResult:
    created: int
    images: tuple[RenderedImage, ...]
    usage: dict[str, Any] | None = None


def result_render(
    *, result: ImageResult, response_format: str, upstream: UpstreamSnapshot, output_format: str | None
) -> RenderedResult:
    """Every image as the caller asked for it (`url` or `b64_json`); raises UpstreamError when one
    cannot be delivered. Nothing here holds on to `result`: once rendered, the caller can drop it."""
    if response_format not in ("url", "b64_json"):
        raise ValueError(f"unknown response_format {response_format!r}")
    rehost_urls = response_format == "url" and any(item.url and not item.b64_json for item in result.items)
    private = rehost_urls and upstream_is_private(upstream=upstream)
    images = tuple(
        _item_render(
            item=item,
            response_format=response_format,
            upstream=upstream,
            output_format=output_format,
            rehost=private,
        )
        for item in result.items
    )
    return RenderedResult(created=result.created, images=images, usage=result.usage)


def result_body(*, rendered: RenderedResult) -> bytes:
    """The JSON body {"created", "data": [{"b64_json" | "url", "revised_prompt"?}, ...], "usage"?}.

    Byte for byte what `json.dumps(..., separators=(",", ":"))` makes of that dict, but built around
    each image's base64 instead of copying it into a str and encoding that again: everything except
    the base64 goes through json.dumps, and the parts are joined once.
    """
    parts: list[bytes] = [b'{"created":', _json(rendered.created), b',"data":[']
    for index, image in enumerate(rendered.images):
        parts.append(b"{" if index == 0 else b",{")
        if image.b64_json is not None:
            parts += (b'"b64_json":"', image.b64_json, b'"')
        else:
            parts += (b'"url":', _json(image.url))
        if image.revised_prompt:
            parts += (b',"revised_prompt":', _json(image.revised_prompt))
        parts.append(b"}")
    parts.append(b"]")
    if rendered.usage is not None:
        parts += (b',"usage":', _json(rendered.usage))
    parts.append(b"}")
    return b"".join(parts)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _item_render(
    *,
    item: ImageItem,
    response_format: str,
    upstream: UpstreamSnapshot,
    output_format: str | None,
    rehost: bool,
) -> RenderedImage:
    revised_prompt = item.revised_prompt or None
    if response_format == "b64_json":
        if item.b64_json:
            # Refused here, before billing, unless it is base64 of a PNG, JPEG or WebP.
            encoded = _base64_checked(encoded=item.b64_json, output_format=output_format)
        else:
            encoded = base64.b64encode(_fetched(item=item, upstream=upstream))
        return RenderedImage(b64_json=encoded, revised_prompt=revised_prompt)
    if item.b64_json:
        data, fmt = _image_decode(encoded=item.b64_json, output_format=output_format)
        url = hosted_image_store(data=data, content_type=CONTENT_TYPES[fmt])
    elif rehost:
        data = _fetched(item=item, upstream=upstream)
        url = hosted_image_store(data=data, content_type=CONTENT_TYPES[image_format_sniff(data=data)])
    else:
        if not (item.url or "").startswith(("https://", "http://")):
            raise UpstreamError(
                "upstream answered an image URL that is not http(s)", status=502, retryable=False, sent=True
            )
        url = item.url
    return RenderedImage(url=url, revised_prompt=revised_prompt)


def _fetched(*, item: ImageItem, upstream: UpstreamSnapshot) -> bytes:
    if not item.url:
        raise UpstreamError(
            "upstream answered an image item without data", status=502, retryable=False, sent=True
        )
    return image_fetch(url=item.url, upstream=upstream)


def _base64_checked(*, encoded: str, output_format: str | None) -> bytes:
    """The upstream's base64 as ASCII bytes, refused unless it is strict base64 of a PNG, JPEG or WebP.

    Only the first bytes are decoded (they name the format): the image is passed on as it came, so
    decoding all of it (a copy as large as the image) would only be thrown away.
    """
    data = _base64_bytes(encoded)
    if not base64_strict_valid(data=data):
        raise _invalid_base64()
    _format_checked(data=binascii.a2b_base64(data[:_BASE64_HEAD_CHARS]), output_format=output_format)
    return data


def base64_strict_valid(*, data: bytes | str) -> bool:
    """True when `data` is strict base64: only the alphabet, a length that is a multiple of 4, and at
    most two `=`, only at the end. That is what `binascii.a2b_base64(data, strict_mode=True)` accepts,
    except the surplus `=` after a complete group that it tolerates (`AAAA=`). Checked without
    decoding, in slices: a large image costs neither a decoded copy nor a full-size temporary."""
    text = isinstance(data, str)
    if (text and not data.isascii()) or len(data) % 4:
        return False
    tail = data[-2:].encode("ascii") if text else data[-2:]
    end = len(data) - (2 if tail == b"==" else 1 if tail.endswith(b"=") else 0)
    for start in range(0, end, _BASE64_CHECK_CHARS):
        piece = data[start : min(start + _BASE64_CHECK_CHARS, end)]
        if (piece.encode("ascii") if text else piece).translate(None, _BASE64_ALPHABET):
            return False
    return True


def _image_decode(*, encoded: str, output_format: str | None) -> tuple[bytes, str]:
    """The image bytes of an upstream's base64 and their format (png, jpeg, webp), read from the bytes."""
    encoded = _data_url_stripped(encoded)
    if not base64_strict_valid(data=encoded):
        raise _invalid_base64()
    data = binascii.a2b_base64(encoded)  # decoded straight from the str: no bytes copy of it first
    return data, _format_checked(data=data, output_format=output_format)


def _data_url_stripped(encoded: str) -> str:
    if encoded[:5].lower() == "data:":
        prefix = _DATA_URL_PREFIX.match(encoded)
        if prefix is not None:
            return encoded[prefix.end() :]
    return encoded


def _base64_bytes(encoded: str) -> bytes:
    """The base64 of an upstream's image as ASCII bytes, without a data URL's prefix."""
    try:
        return _data_url_stripped(encoded).encode("ascii")
    except UnicodeEncodeError:
        raise _invalid_base64() from None


def _format_checked(*, data: bytes, output_format: str | None) -> str:
    fmt = image_format_sniff(data=data)
    if fmt is None:
        raise UpstreamError(
            "upstream answered base64 data that is not a PNG, JPEG or WebP image",
            status=502,
            retryable=False,
            sent=True,
        )
    if output_format and fmt != output_format:
        logger.info("upstream answered %s although output_format %s was asked", fmt, output_format)
    return fmt


def _invalid_base64() -> UpstreamError:
    return UpstreamError(
        "upstream answered invalid base64 image data", status=502, retryable=False, sent=True
    )
