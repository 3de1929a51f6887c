"""What the gateway checks of a text request: only what it needs, everything else passes through.

- The body is one JSON object within GATEWAY_MAX_JSON_BODY_BYTES (413 beyond it, 400 `invalid_json`
  for anything that is not a JSON object, including NaN/Infinity and nesting too deep to parse).
- `TextRequestHead`, before the model is resolved: `model`, a non-empty string; `stream`, a boolean
  when present (and only on the families that stream).
- The family's `OutputLimits`, once the model is known: each output-token limit field the family
  names (`max_completion_tokens` / `max_tokens`, `max_output_tokens`, `max_tokens`) a positive
  integer, not above the model's `max_output_tokens` (read from the validation context).

The checks are pydantic models (core/validation.py maps their refusals), lenient as the providers'
APIs are: unknown and future fields (tools, response formats, metadata, reasoning settings) are not
looked at, and the body is forwarded as it was received, never re-serialised from a model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from pydantic import (
    Field,
    ValidationInfo,
    create_model,
    field_validator,
)

from chat.families import FAMILIES, Family
from chat.snapshots import TextModelSnapshot
from core.errors import InvalidRequest, PayloadTooLarge
from core.validation import RequestBody, body_validate, context_of, refusal

# Parts of a request that stand for an image, a file, or text: an image counts a fixed allowance; a
# file sent by reference (URL or file id, no inline data) counts the file allowance.
IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})
FILE_PART_TYPES = frozenset({"input_file", "file", "document"})
INLINE_DATA_KEYS = ("file_data", "data")
# A `\uD800`-`\uDFFF` escape: JSON allows it, but alone (not the half of a pair) it is no character
# and cannot be sent on as UTF-8.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class TextRequestHead(RequestBody):
    """What every text body must say before its model is resolved. Context: `family`."""

    model: str = Field(description="a model id from GET /v1/models")
    stream: bool = False

    @field_validator("model")
    @classmethod
    def _model_not_blank(cls, model: str) -> str:
        if not model.strip():
            raise refusal("invalid_type", "`model` must not be empty: a model id from GET /v1/models.")
        return model

    @field_validator("stream")
    @classmethod
    def _family_streams(cls, stream: bool, info: ValidationInfo) -> bool:
        family: Family = context_of(info)["family"]
        if stream and not family.streams:
            raise refusal("invalid_value", f"{family.path} does not stream.")
        return stream


class OutputLimits(RequestBody):
    """A family's output-token limit fields (declared per family below), each a positive integer
    within the selected model's maximum. Context: `text_model`."""

    @field_validator("*")
    @classmethod
    def _within_the_models_maximum(cls, value: int | None, info: ValidationInfo) -> int | None:
        text_model: TextModelSnapshot = context_of(info)["text_model"]
        if value is not None and value > text_model.max_output_tokens:
            raise refusal(
                "invalid_value",
                f"`{info.field_name}` is {value}, above the {text_model.max_output_tokens} output tokens "
                f"model {text_model.model_id!r} allows.",
            )
        return value

    def asked(self) -> int | None:
        """The largest limit the request sets (None when it sets none)."""
        values = [value for value in self.model_dump().values() if value is not None]
        return max(values) if values else None


# Each family's limit fields (chat/families.py names them), as a model built once.
OUTPUT_LIMITS: dict[str, type[OutputLimits]] = {
    family.endpoint: create_model(
        f"OutputLimits_{family.endpoint.replace('.', '_')}",
        __base__=OutputLimits,
        **{name: (int | None, Field(None, ge=1)) for name in family.limit_fields},  # type: ignore[call-overload]
    )
    for family in FAMILIES
}


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
    head = body_validate(TextRequestHead, body, context={"family": family})
    return TextBody(body=body, model=head.model, stream=head.stream)


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
    limits = body_validate(OUTPUT_LIMITS[family.endpoint], body, context={"text_model": text_model})
    asked = limits.asked()
    return asked if asked is not None else text_model.max_output_tokens


def input_ceiling_tokens(*, body: dict[str, Any], family: Family | None = None) -> int:
    """An upper bound of the request's input tokens without a tokenizer: every string's UTF-8 bytes
    (keys too; no byte-level BPE token is shorter than one byte), an allowance per image part and
    per file sent by reference, and a fixed overhead for what the provider adds (chat templates,
    tool-use prompts). Iterative, so no nesting depth can exhaust the stack.

    `family` is the family the body is in (a translated body's upstream family). Where it holds its
    images as untyped parts with their bytes (Gemini's `contents[].parts[].inlineData`:
    `inline_image_parts`), there, and only there, such a part counts the image allowance like any
    image part, not its base64 text. Anywhere else (a tool's schema may hold any object) an object
    shaped like one counts by its bytes."""
    total = settings.GATEWAY_TEXT_OVERHEAD_TOKENS
    image_tokens = settings.GATEWAY_TEXT_IMAGE_TOKENS
    file_tokens = settings.GATEWAY_TEXT_FILE_TOKENS
    if family is not None and family.inline_image_parts:
        body, images = _inline_images_apart(body)
        total += images * image_tokens
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


def _inline_images_apart(body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A Gemini-shaped body without the image parts of its turns (a shallow copy), and how many there
    were."""
    contents = body.get("contents")
    if not isinstance(contents, list):
        return body, 0
    images = 0
    kept: list[Any] = []
    for content in contents:
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            kept.append(content)
            continue
        others = [part for part in parts if not _is_inline_image(part)]
        images += len(parts) - len(others)
        kept.append({**content, "parts": others})
    return {**body, "contents": kept}, images


def _is_inline_image(part: Any) -> bool:
    inline = part.get("inlineData") if isinstance(part, dict) else None
    return (
        isinstance(inline, dict)
        and isinstance(inline.get("mimeType"), str)
        and inline["mimeType"].startswith("image/")
    )


def _has_inline_data(part: dict[str, Any]) -> bool:
    """A file part carrying its bytes (counted as bytes, which bounds its tokens) rather than a URL
    or an id (whose size the gateway cannot know)."""
    holders = [part, *(part[key] for key in ("source", "file") if isinstance(part.get(key), dict))]
    return any(isinstance(holder.get(key), str) for holder in holders for key in INLINE_DATA_KEYS)
