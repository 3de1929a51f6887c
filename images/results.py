"""The response body of both image endpoints, converting between `url` and `b64_json` as asked.

| upstream gave | caller asked | answer                                                               |
|---------------|--------------|----------------------------------------------------------------------|
| b64_json      | b64_json     | the base64 as given (checked to be a PNG, JPEG or WebP)              |
| b64_json      | url          | stored by the gateway, a signed expiring URL under GATEWAY_PUBLIC_URL |
| url           | b64_json     | downloaded from the upstream's own host and encoded                  |
| url           | url          | the upstream's URL, or re-hosted when the upstream is on a private   |
|               |              | address (its links would be unreachable and would reveal internals)  |

Failures are `UpstreamError`s (the upstream's answer could not be delivered), so the pipeline maps them
like any other upstream failure and the call is not charged.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from typing import TYPE_CHECKING, Any

from images.hosting import hosted_image_store, image_fetch, upstream_is_private
from images.providers.base import ImageItem, ImageResult, UpstreamError
from images.uploads import CONTENT_TYPES, image_format_sniff

if TYPE_CHECKING:
    from images.models import Upstream

logger = logging.getLogger("gateway.images")

# Some compatible providers answer a data URL instead of bare base64.
_DATA_URL_PREFIX = re.compile(r"data:image/[a-z0-9.+-]+;base64,", re.IGNORECASE)


def result_render(
    *, result: ImageResult, response_format: str, upstream: Upstream, output_format: str | None
) -> dict[str, Any]:
    """{"created", "data": [...], "usage"?} with `url` or `b64_json` in every item as asked."""
    if response_format not in ("url", "b64_json"):
        raise ValueError(f"unknown response_format {response_format!r}")
    rehost_urls = response_format == "url" and any(item.url and not item.b64_json for item in result.items)
    private = rehost_urls and upstream_is_private(upstream=upstream)
    data = [
        _item_render(
            item=item,
            response_format=response_format,
            upstream=upstream,
            output_format=output_format,
            rehost=private,
        )
        for item in result.items
    ]
    body: dict[str, Any] = {"created": result.created, "data": data}
    if result.usage is not None:
        body["usage"] = result.usage
    return body


def _item_render(
    *, item: ImageItem, response_format: str, upstream: Upstream, output_format: str | None, rehost: bool
) -> dict[str, Any]:
    rendered: dict[str, Any] = {}
    if response_format == "b64_json":
        if item.b64_json:
            encoded = _DATA_URL_PREFIX.sub("", item.b64_json, count=1)
            _image_decode(encoded=encoded, output_format=output_format)  # refuse junk before billing
            rendered["b64_json"] = encoded
        else:
            rendered["b64_json"] = base64.b64encode(_fetched(item=item, upstream=upstream)).decode("ascii")
    elif item.b64_json:
        data, fmt = _image_decode(encoded=item.b64_json, output_format=output_format)
        rendered["url"] = hosted_image_store(data=data, content_type=CONTENT_TYPES[fmt])
    elif rehost:
        data = _fetched(item=item, upstream=upstream)
        rendered["url"] = hosted_image_store(
            data=data, content_type=CONTENT_TYPES[image_format_sniff(data=data)]
        )
    else:
        if not (item.url or "").startswith(("https://", "http://")):
            raise UpstreamError(
                "upstream answered an image URL that is not http(s)", status=502, retryable=False, sent=True
            )
        rendered["url"] = item.url
    if item.revised_prompt:
        rendered["revised_prompt"] = item.revised_prompt
    return rendered


def _fetched(*, item: ImageItem, upstream: Upstream) -> bytes:
    if not item.url:
        raise UpstreamError(
            "upstream answered an image item without data", status=502, retryable=False, sent=True
        )
    return image_fetch(url=item.url, upstream=upstream)


def _image_decode(*, encoded: str, output_format: str | None) -> tuple[bytes, str]:
    """The image bytes of an upstream's base64 and their format (png, jpeg, webp), read from the bytes."""
    try:
        data = base64.b64decode(_DATA_URL_PREFIX.sub("", encoded, count=1), validate=True)
    except (binascii.Error, ValueError):
        raise UpstreamError(
            "upstream answered invalid base64 image data", status=502, retryable=False, sent=True
        ) from None
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
    return data, fmt
