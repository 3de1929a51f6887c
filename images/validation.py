"""Validation of the image endpoints' parameters against the spec and the selected model's capabilities.

Everything here runs before anything is reserved or sent upstream. Each refusal is a 400
`invalid_request_error` naming the offending field in `param` and in the message, with the allowed
values where there is a list. Fields outside the spec's list are dropped: only `ImageParams` is
forwarded. The `model` field is resolved (and checked) by `groups.access`; it is ignored here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict

from core.errors import InvalidRequest
from images.capabilities import COMPRESSIBLE_FORMATS, SIZE_PATTERN
from images.models import RESPONSE_FORMATS, ImageModel
from images.uploads import (
    IMAGE_FIELDS,
    MASK_FIELD,
    image_bytes_check,
    mask_bytes_check,
    upload_read,
    upload_size_check,
)

Operation = Literal["generate", "edit"]

# The spec's fields (plus `stream`, for streamed partial images). Anything else is dropped.
SPEC_FIELDS = (
    "model",
    "prompt",
    "n",
    "size",
    "quality",
    "response_format",
    "user",
    "style",
    "background",
    "output_format",
    "output_compression",
    "moderation",
    "input_fidelity",
    "partial_images",
    "stream",
)
MODERATION_VALUES = ("auto", "low")
INPUT_FIDELITY_VALUES = ("high", "low")
PARTIAL_IMAGES_MAX = 3
USER_MAX_CHARS = 256
# Transparent backgrounds need an output format with an alpha channel.
TRANSPARENT_FORMATS = ("png", "webp")

# How the text of a multipart form field is read: n arrives as "2" and must be parsed strictly.
_FORM_INTEGER_FIELDS = ("n", "output_compression", "partial_images")
_FORM_BOOLEAN_FIELDS = ("stream",)
_FORM_INTEGER = re.compile(r"[0-9]{1,9}")
_ECHO_LIMIT = 60


@dataclass(frozen=True)
class ImageParams:
    """The validated request: what the pipeline forwards upstream (plus the images of an edit)."""

    prompt: str
    n: int
    size: str | None
    response_format: str
    output_format: str | None
    # Other validated spec fields present in the request: quality, style, background,
    # output_compression, moderation, input_fidelity, partial_images, user, stream (only when true).
    options: dict[str, Any] = field(default_factory=dict)


def generation_params_validate(*, body: object, image_model: ImageModel) -> ImageParams:
    """Validate a parsed JSON body of POST /v1/images/generations for `image_model`."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object; got a JSON {_json_type(body)}.",
            code="invalid_body",
        )
    return _params_validate(values=body, image_model=image_model, operation="generate")


def edit_params_validate(
    *, data: QueryDict, files: MultiValueDict, image_model: ImageModel
) -> tuple[ImageParams, tuple[bytes, ...], bytes | None]:
    """Validate a multipart POST /v1/images/edits: the form fields, then the images and the mask.

    Returns the parameters, the image bytes (in the order sent) and the mask bytes (or None).
    """
    if not image_model.edits_supported:
        raise InvalidRequest(
            f"Model {image_model.model_id} does not support image edits; use a model that does.",
            param="model",
            code="edits_not_supported",
        )
    params = _params_validate(values=_form_values(data=data), image_model=image_model, operation="edit")
    images, mask = _uploads_validate(data=data, files=files)
    return params, images, mask


def _params_validate(
    *, values: Mapping[str, Any], image_model: ImageModel, operation: Operation
) -> ImageParams:
    model_id = image_model.model_id
    prompt = _prompt(values)
    n = _n(values, image_model=image_model)
    size = _size(values, image_model=image_model)
    output_format = _choice(values, "output_format", allowed=image_model.output_formats, model_id=model_id)
    response_format = _response_format(values, image_model=image_model)

    options: dict[str, Any] = {}
    for name, allowed in (
        ("quality", image_model.qualities),
        ("style", image_model.styles),
        ("background", image_model.backgrounds),
    ):
        value = _choice(values, name, allowed=allowed, model_id=model_id)
        if value is not None:
            options[name] = value
    if options.get("background") == "transparent" and output_format not in (None, *TRANSPARENT_FORMATS):
        raise _invalid(
            "background",
            f"`background` transparent needs output_format png or webp; {output_format} has no transparency.",
        )
    compression = _output_compression(values, image_model=image_model, output_format=output_format)
    if compression is not None:
        options["output_compression"] = compression
    moderation = _enum(values, "moderation", allowed=MODERATION_VALUES)
    if moderation is not None:
        options["moderation"] = moderation
    input_fidelity = _input_fidelity(values, operation=operation)
    if input_fidelity is not None:
        options["input_fidelity"] = input_fidelity
    partial_images = _partial_images(values, image_model=image_model)
    if partial_images is not None:
        options["partial_images"] = partial_images
    user = _user(values)
    if user is not None:
        options["user"] = user
    if _stream(values, image_model=image_model):
        options["stream"] = True
    return ImageParams(
        prompt=prompt,
        n=n,
        size=size,
        response_format=response_format,
        output_format=output_format,
        options=options,
    )


# --- the fields -------------------------------------------------------------------------------------


def _present(values: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """(present, value); JSON null counts as absent, as it does for the upstream APIs."""
    value = values.get(name)
    return value is not None, value


def _prompt(values: Mapping[str, Any]) -> str:
    present, prompt = _present(values, "prompt")
    if not present:
        raise InvalidRequest(
            "`prompt` is required: a non-empty string describing the image.",
            param="prompt",
            code="missing_required_parameter",
        )
    if not isinstance(prompt, str):
        raise _wrong_type("prompt", "a string", prompt)
    if not prompt.strip():
        raise _invalid("prompt", "`prompt` must not be empty.")
    limit = settings.GATEWAY_MAX_PROMPT_CHARS
    if len(prompt) > limit:
        raise InvalidRequest(
            f"`prompt` is {len(prompt):,} characters long; at most {limit:,} are accepted.",
            param="prompt",
            code="string_above_max_length",
        )
    return prompt


def _integer(values: Mapping[str, Any], name: str) -> int | None:
    present, value = _present(values, name)
    if not present:
        return None
    # bool is an int in Python, but `true` is not a number in JSON.
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong_type(name, "an integer", value)
    return value


def _n(values: Mapping[str, Any], *, image_model: ImageModel) -> int:
    n = _integer(values, "n")
    if n is None:
        return 1
    if n < 1:
        raise _invalid("n", f"`n` must be a positive integer (at least 1); got {n}.")
    if n > image_model.max_n:
        raise _invalid(
            "n", f"`n` must be at most {image_model.max_n} for model {image_model.model_id}; got {n}."
        )
    return n


def _size(values: Mapping[str, Any], *, image_model: ImageModel) -> str | None:
    present, size = _present(values, "size")
    if not present:
        return None
    allowed = image_model.sizes
    if not isinstance(size, str):
        raise _wrong_type("size", "a string such as 1024x1024", size)
    if not allowed:
        raise _unsupported("size", model_id=image_model.model_id)
    if size != "auto" and not SIZE_PATTERN.fullmatch(size):
        raise _invalid(
            "size",
            f"`size` must be <width>x<height> such as 1024x1024"
            f"{' or auto' if 'auto' in allowed else ''}; got {_echo(size)}. "
            f"Allowed for model {image_model.model_id}: {', '.join(allowed)}.",
        )
    if size not in allowed:
        raise _invalid(
            "size",
            f"`size` {_echo(size)} is not offered by model {image_model.model_id}; "
            f"allowed: {', '.join(allowed)}.",
        )
    return size


def _choice(values: Mapping[str, Any], name: str, *, allowed: list[str], model_id: str) -> str | None:
    """A string that must be one of the model's values; an empty list means the model lacks the field."""
    present, value = _present(values, name)
    if not present:
        return None
    if not allowed:
        raise _unsupported(name, model_id=model_id)
    if not isinstance(value, str):
        raise _wrong_type(name, f"a string, one of: {', '.join(allowed)}", value)
    if value not in allowed:
        raise _invalid(
            name, f"`{name}` must be one of {', '.join(allowed)} for model {model_id}; got {_echo(value)}."
        )
    return value


def _enum(values: Mapping[str, Any], name: str, *, allowed: tuple[str, ...]) -> str | None:
    present, value = _present(values, name)
    if not present:
        return None
    if not isinstance(value, str):
        raise _wrong_type(name, f"a string, one of: {', '.join(allowed)}", value)
    if value not in allowed:
        raise _invalid(name, f"`{name}` must be one of {', '.join(allowed)}; got {_echo(value)}.")
    return value


def _response_format(values: Mapping[str, Any], *, image_model: ImageModel) -> str:
    chosen = _enum(values, "response_format", allowed=RESPONSE_FORMATS)
    return chosen if chosen is not None else image_model.default_response_format


def _output_compression(
    values: Mapping[str, Any], *, image_model: ImageModel, output_format: str | None
) -> int | None:
    present, _ = _present(values, "output_compression")
    if not present:
        return None
    bounds = image_model.output_compression_range
    if bounds is None:
        raise _unsupported("output_compression", model_id=image_model.model_id)
    compression = _integer(values, "output_compression")
    assert compression is not None  # present was checked above
    low, high = bounds
    if not low <= compression <= high:
        raise _invalid(
            "output_compression",
            f"`output_compression` must be between {low} and {high} for model {image_model.model_id}; "
            f"got {compression}.",
        )
    if output_format not in COMPRESSIBLE_FORMATS:
        given = f"output_format is {output_format}" if output_format else "no output_format was given"
        raise _invalid(
            "output_compression",
            f"`output_compression` applies only with output_format {' or '.join(COMPRESSIBLE_FORMATS)}; "
            f"{given}.",
        )
    return compression


def _input_fidelity(values: Mapping[str, Any], *, operation: Operation) -> str | None:
    present, _ = _present(values, "input_fidelity")
    if present and operation != "edit":
        raise InvalidRequest(
            "`input_fidelity` applies only to image edits (/v1/images/edits); leave it out here.",
            param="input_fidelity",
            code="unsupported_parameter",
        )
    return _enum(values, "input_fidelity", allowed=INPUT_FIDELITY_VALUES)


def _partial_images(values: Mapping[str, Any], *, image_model: ImageModel) -> int | None:
    present, _ = _present(values, "partial_images")
    if not present:
        return None
    if not image_model.stream_supported:
        raise InvalidRequest(
            f"Model {image_model.model_id} does not stream, so it does not support `partial_images`; "
            "leave it out.",
            param="partial_images",
            code="unsupported_parameter",
        )
    count = _integer(values, "partial_images")
    assert count is not None
    if not 0 <= count <= PARTIAL_IMAGES_MAX:
        raise _invalid(
            "partial_images", f"`partial_images` must be between 0 and {PARTIAL_IMAGES_MAX}; got {count}."
        )
    return count


def _user(values: Mapping[str, Any]) -> str | None:
    present, user = _present(values, "user")
    if not present:
        return None
    if not isinstance(user, str):
        raise _wrong_type("user", "a string", user)
    if len(user) > USER_MAX_CHARS:
        raise _invalid("user", f"`user` must be at most {USER_MAX_CHARS} characters; got {len(user)}.")
    return user


def _stream(values: Mapping[str, Any], *, image_model: ImageModel) -> bool:
    present, stream = _present(values, "stream")
    if not present:
        return False
    if not isinstance(stream, bool):
        raise _wrong_type("stream", "a boolean (true or false)", stream)
    if stream and not image_model.stream_supported:
        raise InvalidRequest(
            f"Model {image_model.model_id} does not support streaming; "
            "leave out `stream` or set it to false.",
            param="stream",
            code="unsupported_parameter",
        )
    return stream


# --- multipart forms ----------------------------------------------------------------------------------


def _form_values(*, data: QueryDict) -> dict[str, Any]:
    """The form's spec fields as JSON-like values: integers and booleans parsed strictly from text."""
    values: dict[str, Any] = {}
    for name in SPEC_FIELDS:
        if name == "model":
            continue
        texts = [value for value in data.getlist(name) if not isinstance(value, UploadedFile)]
        if not texts:
            continue
        if len(texts) > 1:
            raise _invalid(name, f"`{name}` was given {len(texts)} times; send it once.")
        text = texts[0]
        if not isinstance(text, str):
            raise _wrong_type(name, "a text field", text)
        if name in _FORM_INTEGER_FIELDS:
            if not _FORM_INTEGER.fullmatch(text):
                raise InvalidRequest(
                    f"`{name}` must be a whole number written in digits, such as 2; got {_echo(text)}.",
                    param=name,
                    code="invalid_type",
                )
            values[name] = int(text)
        elif name in _FORM_BOOLEAN_FIELDS:
            if text not in ("true", "false"):
                raise InvalidRequest(
                    f"`{name}` must be true or false; got {_echo(text)}.", param=name, code="invalid_type"
                )
            values[name] = text == "true"
        else:
            values[name] = text
    return values


def _uploads_validate(*, data: QueryDict, files: MultiValueDict) -> tuple[tuple[bytes, ...], bytes | None]:
    for name in (*IMAGE_FIELDS, MASK_FIELD):
        if any(not isinstance(value, UploadedFile) for value in data.getlist(name)):
            raise InvalidRequest(
                f"`{name}` must be sent as a file part of the multipart form, not as a text field.",
                param=name,
                code="invalid_type",
            )
    uploads = [(name, upload) for name in IMAGE_FIELDS for upload in files.getlist(name)]
    masks = files.getlist(MASK_FIELD)
    if not uploads:
        raise InvalidRequest(
            "`image` is required: the PNG, JPEG or WebP file to edit (repeat `image[]` for several).",
            param="image",
            code="missing_required_parameter",
        )
    limit = settings.GATEWAY_MAX_EDIT_IMAGES
    if len(uploads) > limit:
        raise InvalidRequest(
            f"At most {limit} images can be edited in one request; got {len(uploads)}.",
            param=uploads[0][0],
            code="too_many_images",
        )
    if len(masks) > 1:
        raise _invalid(MASK_FIELD, f"Send at most one `mask`; got {len(masks)}.")
    # Every size is checked before any file is read, so a huge file costs no memory.
    for name, upload in [*uploads, *((MASK_FIELD, mask) for mask in masks)]:
        upload_size_check(uploaded=upload, param=name)
    images: list[bytes] = []
    first = None
    for name, upload in uploads:
        content = upload_read(uploaded=upload, param=name)
        checked = image_bytes_check(data=content, param=name)
        first = first or checked
        images.append(content)
    mask: bytes | None = None
    if masks:
        assert first is not None
        mask = upload_read(uploaded=masks[0], param=MASK_FIELD)
        # The mask applies to the first image (as upstream APIs define it).
        mask_bytes_check(data=mask, image=first)
    return tuple(images), mask


# --- error helpers ------------------------------------------------------------------------------------


def _invalid(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_value")


def _unsupported(param: str, *, model_id: str) -> InvalidRequest:
    return InvalidRequest(
        f"Model {model_id} does not support `{param}`; leave it out.",
        param=param,
        code="unsupported_parameter",
    )


def _wrong_type(param: str, expected: str, value: object) -> InvalidRequest:
    return InvalidRequest(
        f"`{param}` must be {expected}; got {_json_type(value)} {_echo(value)}.",
        param=param,
        code="invalid_type",
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _echo(value: object) -> str:
    """A short, safe rendering of the caller's value for an error message."""
    if isinstance(value, dict | list):
        return ""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= _ECHO_LIMIT else text[: _ECHO_LIMIT - 1] + "…"
