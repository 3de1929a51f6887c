"""What the gateway checks of a text request: only what it needs, everything else passes through.

- The body is one JSON object within GATEWAY_MAX_JSON_BODY_BYTES (413 beyond it, 400 `invalid_json`
  for anything that is not a JSON object, including NaN/Infinity and nesting too deep to parse).
- `model`: a non-empty string.
- `stream`: a boolean when present (and only on the families that stream).
- The output-token limit (`max_completion_tokens` / `max_tokens`, `max_output_tokens`, `max_tokens`
  per family): a positive integer, not above the model's `max_output_tokens`.

Unknown and future fields (tools, response formats, metadata, reasoning settings) are not looked at.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from chat.families import Family
from chat.snapshots import TextModelSnapshot
from core.errors import MISSING_REQUIRED_PARAMETER, InvalidRequest, PayloadTooLarge

# Parts of a request that stand for an image, a file, or text: an image counts a fixed allowance; a
# file sent by reference (URL or file id, no inline data) counts the file allowance.
IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})
FILE_PART_TYPES = frozenset({"input_file", "file", "document"})
INLINE_DATA_KEYS = ("file_data", "data")
# A `\uD800`-`\uDFFF` escape: JSON allows it, but alone (not the half of a pair) it is no character
# and cannot be sent on as UTF-8.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class TextBody:
    """A parsed text request: the body as sent, and what the gateway read of it."""

    body: dict[str, Any]
    model: str
    stream: bool


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def text_body_parse(*, raw: bytes, family: Family) -> TextBody:
    """The request body as a JSON object, with `model` and `stream` checked (before any access
    decision, so a malformed request costs no lookups)."""
    if len(raw) > settings.GATEWAY_MAX_JSON_BODY_BYTES:
        raise PayloadTooLarge(
            f"The request body is larger than this endpoint accepts "
            f"({settings.GATEWAY_MAX_JSON_BODY_BYTES} bytes)."
        )
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidRequest("The request body is nested too deeply.", code="invalid_json") from None
    except ValueError as exc:  # includes UnicodeDecodeError
        raise InvalidRequest(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if SURROGATE_ESCAPE.search(raw) is not None:
        _refuse_lone_surrogates(body)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest(
            "You must provide a model parameter (a model id from GET /v1/models).",
            param="model",
            code=MISSING_REQUIRED_PARAMETER if model is None else "invalid_type",
        )
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest("`stream` must be true or false.", param="stream", code="invalid_type")
    if stream and not family.streams:
        raise InvalidRequest(f"{family.path} does not stream.", param="stream", code="invalid_value")
    return TextBody(body=body, model=model, stream=stream)


def _refuse_lone_surrogates(body: dict[str, Any]) -> None:
    """A string holding half of a surrogate pair cannot be encoded, forwarded or recorded."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            "The request body is not valid JSON: a string holds an unpaired surrogate (\\ud800-\\udfff).",
            code="invalid_json",
        ) from None


def output_limit_validate(*, body: dict[str, Any], family: Family, text_model: TextModelSnapshot) -> int:
    """The most output tokens this call can produce: the request's limit (each of the family's limit
    fields it sets must be a positive integer within the model's maximum), or the model's maximum
    when it sets none."""
    asked: list[int] = []
    for field in family.limit_fields:
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidRequest(f"`{field}` must be a positive integer.", param=field, code="invalid_value")
        if value > text_model.max_output_tokens:
            raise InvalidRequest(
                f"`{field}` is {value}, above the {text_model.max_output_tokens} output tokens "
                f"model {text_model.model_id!r} allows.",
                param=field,
                code="invalid_value",
            )
        asked.append(value)
    return max(asked) if asked else text_model.max_output_tokens


def input_ceiling_tokens(*, body: dict[str, Any]) -> int:
    """An upper bound of the request's input tokens without a tokenizer: every string's UTF-8 bytes
    (keys too; no byte-level BPE token is shorter than one byte), an allowance per image part and
    per file sent by reference, and a fixed overhead for what the provider adds (chat templates,
    tool-use prompts). Iterative, so no nesting depth can exhaust the stack."""
    total = settings.GATEWAY_TEXT_OVERHEAD_TOKENS
    image_tokens = settings.GATEWAY_TEXT_IMAGE_TOKENS
    file_tokens = settings.GATEWAY_TEXT_FILE_TOKENS
    pending: list[Any] = [body]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            total += len(value) if value.isascii() else len(value.encode("utf-8"))
        elif isinstance(value, dict):
            # `type` is a part's kind in content, but any value in a JSON schema (a tool parameter
            # named "type" is an object there).
            part_type = value.get("type")
            if not isinstance(part_type, str):
                part_type = None
            if part_type in IMAGE_PART_TYPES:
                total += image_tokens
                continue
            if part_type in FILE_PART_TYPES and not _has_inline_data(value):
                total += file_tokens
                continue
            for key, item in value.items():
                total += len(key)
                pending.append(item)
        elif isinstance(value, list):
            pending.extend(value)
        elif value is not None:
            total += len(str(value))
    return total


def _has_inline_data(part: dict[str, Any]) -> bool:
    """A file part carrying its bytes (counted as bytes, which bounds its tokens) rather than a URL
    or an id (whose size the gateway cannot know)."""
    holders = [part, *(part[key] for key in ("source", "file") if isinstance(part.get(key), dict))]
    return any(isinstance(holder.get(key), str) for holder in holders for key in INLINE_DATA_KEYS)
