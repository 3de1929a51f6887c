"""Validation of the image endpoints' parameters against the spec and the selected model's capabilities.

The spec's fields are declared once, in `ImageRequestSerializer` (a DRF serializer): each field class
says its JSON type, its allowed values (fixed, or read from the image model in the serializer's
context), and when the model does not support it. Everything here runs before anything is reserved or
sent upstream. Each refusal is a 400 `invalid_request_error` naming the offending field in `param` and
in the message, with the allowed values where there is a list; the DRF error code is the API's code.
Fields outside the declaration are dropped: only `ImageParams` is forwarded. The `model` field is
resolved (and checked) by `groups.access`; it is ignored here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, Protocol

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict
from rest_framework import serializers
from rest_framework.fields import empty

from core.errors import InvalidRequest
from images.capabilities import COMPRESSIBLE_FORMATS, SIZE_PATTERN
from images.models import RESPONSE_FORMATS
from images.uploads import (
    IMAGE_FIELDS,
    MASK_FIELD,
    image_bytes_check,
    mask_bytes_check,
    upload_read,
    upload_size_check,
)

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

# How the text of a multipart form field is read: n arrives as "2" and must be parsed strictly.
_FORM_INTEGER = re.compile(r"[0-9]{1,9}")
_ECHO_LIMIT = 60
# DRF's own code for a missing required field, in the API's words.
_CODES = {"required": "missing_required_parameter"}


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


# --- the fields -------------------------------------------------------------------------------------


class SpecField(serializers.Field):
    """A spec field, optional unless said otherwise; JSON null counts as absent, as upstream APIs read it.

    `requires` names the image model's flag without which the field is refused as unsupported;
    `operations` the endpoints that take it.
    """

    expected = "a string"

    def __init__(
        self, *, requires: str | None = None, operations: tuple[Operation, ...] | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.requires = requires
        self.operations = operations

    def get_value(self, dictionary: Mapping[str, Any]) -> Any:
        value = dictionary.get(self.field_name, empty)
        return empty if value is None else value

    @property
    def image_model(self) -> ImageCapabilities:
        return self.context["image_model"]

    def to_internal_value(self, data: Any) -> Any:
        if self.operations is not None and self.context["operation"] not in self.operations:
            self.refuse(
                f"`{self.field_name}` applies only to image edits (/v1/images/edits); leave it out here.",
                code="unsupported_parameter",
            )
        if self.requires is not None and not getattr(self.image_model, self.requires):
            self.refuse_unsupported()
        return self.check(self.typed(data))

    def typed(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.refuse_type(data)
        return data

    def check(self, value: Any) -> Any:
        return value

    def refuse(self, message: str, *, code: str = "invalid_value") -> NoReturn:
        raise serializers.ValidationError(message, code=code)

    def refuse_type(self, value: object) -> NoReturn:
        self.refuse(
            f"`{self.field_name}` must be {self.expected}; got {_json_type(value)} {_echo(value)}.",
            code="invalid_type",
        )

    def refuse_unsupported(self) -> NoReturn:
        self.refuse(
            f"Model {self.image_model.model_id} does not support `{self.field_name}`; leave it out.",
            code="unsupported_parameter",
        )


class TextField(SpecField):
    def __init__(self, *, max_length: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_length = max_length

    def check(self, value: str) -> str:
        if len(value) > self.max_length:
            self.refuse(
                f"`{self.field_name}` must be at most {self.max_length} characters; got {len(value)}."
            )
        return value


class PromptField(SpecField):
    """Required, not blank, at most GATEWAY_MAX_PROMPT_CHARS characters."""

    default_error_messages = {"required": "`prompt` is required: a non-empty string describing the image."}

    def __init__(self) -> None:
        super().__init__(required=True)

    def check(self, prompt: str) -> str:
        if not prompt.strip():
            self.refuse("`prompt` must not be empty.")
        limit = settings.GATEWAY_MAX_PROMPT_CHARS
        if len(prompt) > limit:
            self.refuse(
                f"`prompt` is {len(prompt):,} characters long; at most {limit:,} are accepted.",
                code="string_above_max_length",
            )
        return prompt


class IntegerField(SpecField):
    """A JSON integer (`true` is not one, though Python's bool is an int); a form's digits."""

    expected = "an integer"

    def typed(self, data: Any) -> Any:
        if not isinstance(data, int) or isinstance(data, bool):
            self.refuse_type(data)
        return data


class CountField(IntegerField):
    """`n`: at least 1, at most the model's max_n."""

    def check(self, n: int) -> int:
        if n < 1:
            self.refuse(f"`n` must be a positive integer (at least 1); got {n}.")
        if n > self.image_model.max_n:
            model = self.image_model
            self.refuse(f"`n` must be at most {model.max_n} for model {model.model_id}; got {n}.")
        return n


class CompressionField(IntegerField):
    """Within the model's output_compression_range; a model without one does not take the field."""

    def to_internal_value(self, data: Any) -> Any:
        if self.image_model.output_compression_range is None:
            self.refuse_unsupported()
        return super().to_internal_value(data)

    def check(self, compression: int) -> int:
        low, high = self.image_model.output_compression_range
        if not low <= compression <= high:
            self.refuse(
                f"`{self.field_name}` must be between {low} and {high} for model "
                f"{self.image_model.model_id}; got {compression}."
            )
        return compression


class PartialImagesField(IntegerField):
    """Streamed partial images: only for a streaming model, 0 to PARTIAL_IMAGES_MAX."""

    def refuse_unsupported(self) -> NoReturn:
        self.refuse(
            f"Model {self.image_model.model_id} does not stream, so it does not support `partial_images`; "
            "leave it out.",
            code="unsupported_parameter",
        )

    def check(self, count: int) -> int:
        if not 0 <= count <= PARTIAL_IMAGES_MAX:
            self.refuse(f"`partial_images` must be between 0 and {PARTIAL_IMAGES_MAX}; got {count}.")
        return count


class StreamField(SpecField):
    """A JSON boolean; true only for a model that streams."""

    expected = "a boolean (true or false)"

    def typed(self, data: Any) -> Any:
        if not isinstance(data, bool):
            self.refuse_type(data)
        return data

    def check(self, stream: bool) -> bool:
        if stream and not self.image_model.stream_supported:
            self.refuse(
                f"Model {self.image_model.model_id} does not support streaming; "
                "leave out `stream` or set it to false.",
                code="unsupported_parameter",
            )
        return stream


class ChoiceField(SpecField):
    """One of fixed values (`choices`), or of the model's (`capability`, an attribute naming a tuple;
    an empty one means the model does not take the field)."""

    def __init__(
        self, *, choices: tuple[str, ...] = (), capability: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.choices_fixed = choices
        self.capability = capability

    @property
    def allowed(self) -> tuple[str, ...]:
        return tuple(getattr(self.image_model, self.capability)) if self.capability else self.choices_fixed

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"a string, one of: {', '.join(self.allowed)}"

    def to_internal_value(self, data: Any) -> Any:
        if self.capability and not self.allowed:
            self.refuse_unsupported()
        return super().to_internal_value(data)

    def check(self, value: str) -> str:
        if value not in self.allowed:
            for_model = f" for model {self.image_model.model_id}" if self.capability else ""
            allowed = ", ".join(self.allowed)
            self.refuse(f"`{self.field_name}` must be one of {allowed}{for_model}; got {_echo(value)}.")
        return value


class SizeField(SpecField):
    """<width>x<height> (or auto) among the model's sizes."""

    expected = "a string such as 1024x1024"

    def to_internal_value(self, data: Any) -> Any:
        size = self.typed(data)
        allowed = tuple(self.image_model.sizes)
        model_id = self.image_model.model_id
        if not allowed:
            self.refuse_unsupported()
        if size != "auto" and not SIZE_PATTERN.fullmatch(size):
            self.refuse(
                f"`size` must be <width>x<height> such as 1024x1024"
                f"{' or auto' if 'auto' in allowed else ''}; got {_echo(size)}. "
                f"Allowed for model {model_id}: {', '.join(allowed)}."
            )
        if size not in allowed:
            self.refuse(
                f"`size` {_echo(size)} is not offered by model {model_id}; allowed: {', '.join(allowed)}."
            )
        return size


class ImageRequestSerializer(serializers.Serializer):
    """The spec's fields of both image endpoints, checked in this order; the first refusal is answered.

    Context: `image_model` (the selected model's capabilities) and `operation` ("generate" or "edit").
    """

    prompt = PromptField()
    n = CountField()
    size = SizeField()
    output_format = ChoiceField(capability="output_formats")
    response_format = ChoiceField(choices=RESPONSE_FORMATS)
    quality = ChoiceField(capability="qualities")
    style = ChoiceField(capability="styles")
    background = ChoiceField(capability="backgrounds")
    output_compression = CompressionField()
    moderation = ChoiceField(choices=MODERATION_VALUES)
    input_fidelity = ChoiceField(choices=INPUT_FIDELITY_VALUES, operations=("edit",))
    partial_images = PartialImagesField(requires="stream_supported")
    user = TextField(max_length=USER_MAX_CHARS)
    stream = StreamField()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        output_format = attrs.get("output_format")
        if attrs.get("background") == "transparent" and output_format not in (None, *TRANSPARENT_FORMATS):
            raise serializers.ValidationError(
                {
                    "background": f"`background` transparent needs output_format png or webp; "
                    f"{output_format} has no transparency."
                },
                code="invalid_value",
            )
        if "output_compression" in attrs and output_format not in COMPRESSIBLE_FORMATS:
            given = f"output_format is {output_format}" if output_format else "no output_format was given"
            raise serializers.ValidationError(
                {
                    "output_compression": "`output_compression` applies only with output_format "
                    f"{' or '.join(COMPRESSIBLE_FORMATS)}; {given}."
                },
                code="invalid_value",
            )
        return attrs


# The fields the pipeline forwards in `ImageParams` itself; the others go to its options.
_PARAMS_FIELDS = ("prompt", "n", "size", "response_format", "output_format")
# The spec's fields (plus `stream`, for streamed partial images). Anything else is dropped.
SPEC_FIELDS = ("model", *ImageRequestSerializer._declared_fields)


def generation_params_validate(*, body: object, image_model: ImageCapabilities) -> ImageParams:
    """Validate a parsed JSON body of POST /v1/images/generations for `image_model`."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object; got a JSON {_json_type(body)}.",
            code="invalid_body",
        )
    return _params_validate(values=body, image_model=image_model, operation="generate")


def edit_params_validate(
    *, data: QueryDict, files: MultiValueDict, image_model: ImageCapabilities
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
    *, values: Mapping[str, Any], image_model: ImageCapabilities, operation: Operation
) -> ImageParams:
    serializer = ImageRequestSerializer(
        data=values, context={"image_model": image_model, "operation": operation}
    )
    if not serializer.is_valid():
        # The first field in declaration order with a refusal; each field reports one.
        param, details = next(iter(serializer.errors.items()))
        detail = details[0]
        raise InvalidRequest(str(detail), param=param, code=_CODES.get(detail.code, detail.code))
    valid = serializer.validated_data
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


# --- multipart forms ----------------------------------------------------------------------------------


def _form_values(*, data: QueryDict) -> dict[str, Any]:
    """The form's spec fields as JSON-like values: integers and booleans parsed strictly from text."""
    values: dict[str, Any] = {}
    for name, spec in ImageRequestSerializer._declared_fields.items():
        texts = [value for value in data.getlist(name) if not isinstance(value, UploadedFile)]
        if not texts:
            continue
        if len(texts) > 1:
            raise _invalid(name, f"`{name}` was given {len(texts)} times; send it once.")
        text = texts[0]
        if not isinstance(text, str):
            raise InvalidRequest(
                f"`{name}` must be a text field; got {_json_type(text)}.", param=name, code="invalid_type"
            )
        if isinstance(spec, IntegerField):
            if not _FORM_INTEGER.fullmatch(text):
                raise InvalidRequest(
                    f"`{name}` must be a whole number written in digits, such as 2; got {_echo(text)}.",
                    param=name,
                    code="invalid_type",
                )
            values[name] = int(text)
        elif isinstance(spec, StreamField):
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
