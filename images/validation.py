"""Validation of the image endpoints' parameters against the spec and the selected model's capabilities.

`ImageRequest` (a pydantic model, strict, built once at import) declares the spec's fields of both
endpoints with their JSON types and fixed bounds. What a model allows (sizes, qualities, styles,
backgrounds, output formats, the compression range, `max_n`, streaming) is that model's data: the
validators read the selected image model from the validation context, through the tables below that
say which of its capabilities each field needs and takes its values from. Everything here runs before
anything is reserved or sent upstream. Each refusal is a 400 `invalid_request_error` naming the field
in `param` and in the message, with the allowed values where there is a list
(core.validation maps pydantic's errors). Fields outside the declaration are dropped: only
`ImageParams` is forwarded. The `model` field is resolved (and checked) by `keys.group_access`; it is
ignored here. The uploads of an edit are checked in images/uploads.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict
from pydantic import Field, ValidationInfo, field_validator

from core.errors import InvalidRequest
from core.validation import RequestBody, body_validate, context_of, echo, json_type, refusal
from images.capabilities import COMPRESSIBLE_FORMATS, SIZE_PATTERN
from images.models import RESPONSE_FORMATS
from images.uploads import EditUploads, edit_uploads_collect

Operation = Literal["generate", "edit"]


class ImageCapabilities(Protocol):
    """What validation reads of the selected image model (its cached snapshot, or the row)."""

    model_id: str
    sizes: Sequence[str]
    qualities: Sequence[str]
    styles: Sequence[str]
    backgrounds: Sequence[str]
    output_formats: Sequence[str]
    output_compression_range: tuple[int, int] | None
    max_n: int
    edits_supported: bool
    stream_supported: bool
    default_response_format: str


MODERATION_VALUES = ("auto", "low")
INPUT_FIDELITY_VALUES = ("high", "low")
PARTIAL_IMAGES_MAX = 3
USER_MAX_CHARS = 256
# Transparent backgrounds need an output format with an alpha channel.
TRANSPARENT_FORMATS = ("png", "webp")

# The image model's capability each field needs: the model does not take the field when it is empty
# (or false, or no range).
MODEL_CAPABILITY = {
    "size": "sizes",
    "output_format": "output_formats",
    "quality": "qualities",
    "style": "styles",
    "background": "backgrounds",
    "output_compression": "output_compression_range",
    "partial_images": "stream_supported",
}
# Where a string field's allowed values come from: the image model's list, or a fixed one.
MODEL_CHOICES = {
    "output_format": "output_formats",
    "quality": "qualities",
    "style": "styles",
    "background": "backgrounds",
}
FIXED_CHOICES = {
    "response_format": RESPONSE_FORMATS,
    "moderation": MODERATION_VALUES,
    "input_fidelity": INPUT_FIDELITY_VALUES,
}
# The fields only /v1/images/edits takes.
EDIT_ONLY = ("input_fidelity",)

# How the text of a multipart form field is read: n arrives as "2" and must be parsed strictly.
_FORM_INTEGER = re.compile(r"[0-9]{1,9}")


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


class ImageRequest(RequestBody):
    """The spec's fields of both image endpoints. Per field: the endpoint and the model's support
    first, then the JSON type and the fixed bounds, then the model's values. A rule across fields
    (a transparent background, a compression level) is checked by the later field's validator from
    the earlier field's value. The first refusal in declaration order is answered.

    Context: `image_model` (the selected model's capabilities) and `operation` ("generate" or "edit").
    """

    prompt: str = Field(description="a non-empty string describing the image")
    n: int | None = Field(None, ge=1)
    size: str | None = None
    output_format: str | None = None
    response_format: str | None = None
    quality: str | None = None
    style: str | None = None
    background: str | None = None
    output_compression: int | None = None
    moderation: str | None = None
    input_fidelity: str | None = None
    partial_images: int | None = Field(None, ge=0, le=PARTIAL_IMAGES_MAX)
    user: str | None = Field(None, max_length=USER_MAX_CHARS)
    stream: bool | None = None

    @field_validator(*MODEL_CAPABILITY, *EDIT_ONLY, mode="before")
    @classmethod
    def _taken_here(cls, value: Any, info: ValidationInfo) -> Any:
        """Whether this endpoint and the selected model take the field at all, whatever its value."""
        name, image_model = info.field_name, _image_model(info)
        assert name is not None
        if name in EDIT_ONLY and context_of(info)["operation"] != "edit":
            raise refusal(
                "unsupported_parameter",
                f"`{name}` applies only to image edits (/v1/images/edits); leave it out here.",
            )
        if name in MODEL_CAPABILITY and not getattr(image_model, MODEL_CAPABILITY[name]):
            raise refusal(
                "unsupported_parameter",
                f"Model {image_model.model_id} does not support `{name}`; leave it out.",
            )
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt_within_limit(cls, prompt: str) -> str:
        if not prompt.strip():
            raise refusal("invalid_value", "`prompt` must not be empty.")
        limit = settings.GATEWAY_MAX_PROMPT_CHARS
        if len(prompt) > limit:
            raise refusal(
                "string_above_max_length",
                f"`prompt` is {len(prompt):,} characters long; at most {limit:,} are accepted.",
            )
        return prompt

    @field_validator("n")
    @classmethod
    def _n_within_max_n(cls, n: int, info: ValidationInfo) -> int:
        image_model = _image_model(info)
        if n > image_model.max_n:
            raise refusal(
                "invalid_value",
                f"`n` must be at most {image_model.max_n} for model {image_model.model_id}; got {n}.",
            )
        return n

    @field_validator("size")
    @classmethod
    def _size_offered(cls, size: str, info: ValidationInfo) -> str:
        """<width>x<height> (or auto) among the model's sizes."""
        image_model = _image_model(info)
        allowed = tuple(image_model.sizes)
        if size != "auto" and not SIZE_PATTERN.fullmatch(size):
            raise refusal(
                "invalid_value",
                f"`size` must be <width>x<height> such as 1024x1024"
                f"{' or auto' if 'auto' in allowed else ''}; got {echo(size)}. "
                f"Allowed for model {image_model.model_id}: {', '.join(allowed)}.",
            )
        if size not in allowed:
            raise refusal(
                "invalid_value",
                f"`size` {echo(size)} is not offered by model {image_model.model_id}; "
                f"allowed: {', '.join(allowed)}.",
            )
        return size

    @field_validator(*MODEL_CHOICES, *FIXED_CHOICES)
    @classmethod
    def _one_of_the_allowed(cls, value: str, info: ValidationInfo) -> str:
        name = info.field_name
        assert name is not None
        if name in MODEL_CHOICES:
            image_model = _image_model(info)
            allowed, for_model = (
                tuple(getattr(image_model, MODEL_CHOICES[name])),
                f" for model {image_model.model_id}",
            )
        else:
            allowed, for_model = FIXED_CHOICES[name], ""
        if value not in allowed:
            raise refusal(
                "invalid_value",
                f"`{name}` must be one of {', '.join(allowed)}{for_model}; got {echo(value)}.",
            )
        if name == "background" and value == "transparent":
            output_format = info.data.get("output_format")
            if output_format not in (None, *TRANSPARENT_FORMATS):
                raise refusal(
                    "invalid_value",
                    f"`background` transparent needs output_format png or webp; "
                    f"{output_format} has no transparency.",
                )
        return value

    @field_validator("output_compression")
    @classmethod
    def _compression_in_range(cls, compression: int, info: ValidationInfo) -> int:
        """Within the model's range, and only for a format that takes a compression level."""
        image_model = _image_model(info)
        assert image_model.output_compression_range is not None  # else refused as unsupported
        low, high = image_model.output_compression_range
        if not low <= compression <= high:
            raise refusal(
                "invalid_value",
                f"`output_compression` must be between {low} and {high} for model "
                f"{image_model.model_id}; got {compression}.",
            )
        output_format = info.data.get("output_format")
        if output_format not in COMPRESSIBLE_FORMATS:
            given = f"output_format is {output_format}" if output_format else "no output_format was given"
            raise refusal(
                "invalid_value",
                "`output_compression` applies only with output_format "
                f"{' or '.join(COMPRESSIBLE_FORMATS)}; {given}.",
            )
        return compression

    @field_validator("stream")
    @classmethod
    def _stream_supported(cls, stream: bool, info: ValidationInfo) -> bool:
        image_model = _image_model(info)
        if stream and not image_model.stream_supported:
            raise refusal(
                "unsupported_parameter",
                f"Model {image_model.model_id} does not support streaming; "
                "leave out `stream` or set it to false.",
            )
        return stream


def _image_model(info: ValidationInfo) -> ImageCapabilities:
    return context_of(info)["image_model"]


# The fields the pipeline forwards in `ImageParams` itself; the others go to its options.
_PARAMS_FIELDS = ("prompt", "n", "size", "response_format", "output_format")
# How a multipart form's text is read for each declared field: integers and booleans parsed strictly.
_FORM_INTEGERS = frozenset(
    name for name, info in ImageRequest.model_fields.items() if int in get_args(info.annotation)
)
_FORM_BOOLEANS = frozenset(
    name for name, info in ImageRequest.model_fields.items() if bool in get_args(info.annotation)
)


def generation_params_validate(*, body: object, image_model: ImageCapabilities) -> ImageParams:
    """Validate a parsed JSON body of POST /v1/images/generations for `image_model`."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object; got a JSON {json_type(body)}.",
            code="invalid_body",
        )
    return _params_validate(values=body, image_model=image_model, operation="generate")


def edit_fields_validate(
    *, data: QueryDict, files: MultiValueDict, image_model: ImageCapabilities
) -> tuple[ImageParams, EditUploads]:
    """The cheap half of an edit's validation: the model's support, the form fields, and the file
    parts' presence, count and recorded sizes. No file is read."""
    if not image_model.edits_supported:
        raise InvalidRequest(
            f"Model {image_model.model_id} does not support image edits; use a model that does.",
            param="model",
            code="edits_not_supported",
        )
    params = _params_validate(values=_form_values(data=data), image_model=image_model, operation="edit")
    return params, edit_uploads_collect(data=data, files=files)


def _params_validate(
    *, values: Mapping[str, Any], image_model: ImageCapabilities, operation: Operation
) -> ImageParams:
    request = body_validate(
        ImageRequest, values, context={"image_model": image_model, "operation": operation}
    )
    valid = request.model_dump(exclude_none=True)
    options = {name: value for name, value in valid.items() if name not in _PARAMS_FIELDS}
    if not options.get("stream", True):
        del options["stream"]
    return ImageParams(
        prompt=valid["prompt"],
        n=valid.get("n", 1),
        size=valid.get("size"),
        response_format=valid.get("response_format", image_model.default_response_format),
        output_format=valid.get("output_format"),
        options=options,
    )


def _form_values(*, data: QueryDict) -> dict[str, Any]:
    """The form's declared fields as JSON-like values: integers and booleans parsed strictly from text
    (a form has no types; `n=2.5` or `stream=yes` is refused here, before the model sees it)."""
    values: dict[str, Any] = {}
    for name in ImageRequest.model_fields:
        texts = [value for value in data.getlist(name) if not isinstance(value, UploadedFile)]
        if not texts:
            continue
        if len(texts) > 1:
            raise InvalidRequest(
                f"`{name}` was given {len(texts)} times; send it once.", param=name, code="invalid_value"
            )
        text = texts[0]
        if not isinstance(text, str):
            raise InvalidRequest(
                f"`{name}` must be a text field; got {json_type(text)}.", param=name, code="invalid_type"
            )
        if name in _FORM_INTEGERS:
            if not _FORM_INTEGER.fullmatch(text):
                raise InvalidRequest(
                    f"`{name}` must be a whole number written in digits, such as 2; got {echo(text)}.",
                    param=name,
                    code="invalid_type",
                )
            values[name] = int(text)
        elif name in _FORM_BOOLEANS:
            if text not in ("true", "false"):
                raise InvalidRequest(
                    f"`{name}` must be true or false; got {echo(text)}.", param=name, code="invalid_type"
                )
            values[name] = text == "true"
        else:
            values[name] = text
    return values
