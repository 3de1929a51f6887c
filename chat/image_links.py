"""Images a caller gave by link, made into bytes for an upstream whose API takes none by link (Gemini's
generateContent reads an image's bytes, `inlineData`, and fetches no arbitrary web URL).

The translators do no I/O, so the pipeline does this before translating: it finds the http(s) image
links of the caller's body where the translator reads images (a user message's `image_url` part in
Chat Completions, its `input_image` part in Responses, its image block's `url` source in Messages),
downloads each once under the request-forgery rules (upstreams/url_fetch.py, upstreams/ssrf.py), and
gives the translator a copy of the body with each link replaced by the image's bytes in the caller's
own form (a `data:` URL; a base64 source in Messages), under the media type its bytes show. The
caller's body itself is left as it came: an upstream of the model that takes links (an OpenAI or
Anthropic one, for a failover) is sent the link.

Limits: at most `MAX_IMAGE_LINKS` distinct links a request; PNG, JPEG, WebP, HEIC or HEIF (Gemini's
image types), by the declared Content-Type and by the bytes; all of a request's images together
within GATEWAY_FETCH_MAX_BYTES, all downloaded within GATEWAY_FETCH_TIMEOUT_SECONDS. Whatever breaks
a rule is the caller's 400 naming the field (`messages[0].content[1].image_url.url`), before anything
is reserved.
"""

from __future__ import annotations

import base64
import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from django.conf import settings

from chat.families import CHAT, COUNT_TOKENS, MESSAGES_FAMILY, RESPONSES_FAMILY, Family
from core.errors import InvalidRequest
from upstreams.errors import UrlRefused
from upstreams.imageformats import image_media_type_sniff
from upstreams.url_fetch import url_fetch

MAX_IMAGE_LINKS = 16
# The image types Gemini reads (https://ai.google.dev/gemini-api/docs/image-understanding).
IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
INVALID_IMAGE_URL = "invalid_image_url"


@dataclass(frozen=True)
class ImageLink:
    """An http(s) image link in a body: where the caller wrote it, the URL, and how to put the image's
    bytes in its place (media type, base64 text) in that body."""

    param: str
    url: str
    replace: Callable[[str, str], None]


def image_links_present(*, body: dict[str, Any], family: Family) -> bool:
    """Whether the body gives an image by http(s) link where a translator reads images."""
    return any(True for _ in _links(body, family))


def image_links_inlined(*, body: dict[str, Any], family: Family) -> dict[str, Any]:
    """The body with every image link replaced by the image's bytes (a copy; `body` is untouched), or
    `body` itself when it has no link. Raises InvalidRequest naming the link's field."""
    if not image_links_present(body=body, family=family):
        return body
    inlined = copy.deepcopy(body)
    links = list(_links(inlined, family))
    distinct = list(dict.fromkeys(link.url for link in links))
    if len(distinct) > MAX_IMAGE_LINKS:
        beyond = next(link for link in links if link.url == distinct[MAX_IMAGE_LINKS])
        raise _refused(
            beyond, f"at most {MAX_IMAGE_LINKS} images can be given by link in one request to this model"
        )
    deadline = time.monotonic() + settings.GATEWAY_FETCH_TIMEOUT_SECONDS
    budget = settings.GATEWAY_FETCH_MAX_BYTES
    fetched: dict[str, tuple[str, str]] = {}  # url -> (media type, base64)
    for link in links:
        if link.url not in fetched:
            media_type, data = _image_fetch(link, deadline=deadline, max_bytes=budget)
            budget -= len(data)
            fetched[link.url] = (media_type, base64.b64encode(data).decode("ascii"))
        link.replace(*fetched[link.url])
    return inlined


def _image_fetch(link: ImageLink, *, deadline: float, max_bytes: int) -> tuple[str, bytes]:
    try:
        body = url_fetch(url=link.url, deadline=deadline, max_bytes=max_bytes, media_types=IMAGE_MEDIA_TYPES)
    except UrlRefused as refused:
        raise _refused(link, refused.message) from None
    media_type = image_media_type_sniff(data=body.data)
    if media_type not in IMAGE_MEDIA_TYPES:
        raise _refused(link, "the file is not a PNG, JPEG, WebP, HEIC or HEIF image")
    return media_type, body.data


def _refused(link: ImageLink, reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"{link.param}: the image could not be used: {reason}. This model's provider needs an image's "
        "bytes, which the gateway downloads from a public http(s) link; or give the image as a base64 "
        "data: URL.",
        param=link.param,
        code=INVALID_IMAGE_URL,
    )


def _is_link(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and value[:8].lower().startswith(("http://", "https://"))


def _user_contents(messages: Any) -> Iterator[tuple[str, list[Any]]]:
    """(param, content list) of each user turn of a `messages` or `input` list."""
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                yield f"[{index}].content", content


def _chat_links(body: dict[str, Any]) -> Iterator[ImageLink]:
    for where, content in _user_contents(body.get("messages")):
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            at = f"messages{where}[{index}].image_url"
            image = part.get("image_url")
            if isinstance(image, dict) and _is_link(image.get("url")):
                yield ImageLink(f"{at}.url", image["url"], _setter(image, "url", _data_url))
            elif _is_link(image):
                yield ImageLink(at, image, _setter(part, "image_url", _data_url))


def _responses_links(body: dict[str, Any]) -> Iterator[ImageLink]:
    items = body.get("input")
    messages = [
        item if isinstance(item, dict) and item.get("type", "message") == "message" else None
        for item in (items if isinstance(items, list) else ())
    ]
    for where, content in _user_contents(messages):
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "input_image":
                continue
            if _is_link(part.get("image_url")):
                at = f"input{where}[{index}].image_url"
                yield ImageLink(at, part["image_url"], _setter(part, "image_url", _data_url))


def _messages_links(body: dict[str, Any]) -> Iterator[ImageLink]:
    for where, content in _user_contents(body.get("messages")):
        for index, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "image":
                continue
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "url" and _is_link(source.get("url")):
                at = f"messages{where}[{index}].source.url"
                yield ImageLink(at, source["url"], _setter(block, "source", _base64_source))


def _data_url(media_type: str, data: str) -> str:
    return f"data:{media_type};base64,{data}"


def _base64_source(media_type: str, data: str) -> dict[str, str]:
    return {"type": "base64", "media_type": media_type, "data": data}


def _setter(holder: dict[str, Any], key: str, form: Callable[[str, str], Any]) -> Callable[[str, str], None]:
    def replace(media_type: str, data: str) -> None:
        holder[key] = form(media_type, data)

    return replace


_WALKS: dict[str, Callable[[dict[str, Any]], Iterator[ImageLink]]] = {
    CHAT.endpoint: _chat_links,
    RESPONSES_FAMILY.endpoint: _responses_links,
    MESSAGES_FAMILY.endpoint: _messages_links,
    COUNT_TOKENS.endpoint: _messages_links,
}


def _links(body: dict[str, Any], family: Family) -> Iterator[ImageLink]:
    walk = _WALKS.get(family.endpoint)
    return iter(()) if walk is None else walk(body)
