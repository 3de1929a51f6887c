"""Validation of the image endpoints' parameters against the spec and the selected model's capabilities.

The spec's fields are declared once, in `ImageRequest` (a pydantic model): each field's annotation
carries a `SpecField` that says its JSON type, its allowed values (fixed, or read from the image model
in the validation context), and when the model does not support it. The model is built once, at
import; a validation is one call into pydantic's compiled core, which calls back only for the fields
present. Everything here runs before anything is reserved or sent upstream. Each refusal is a 400
`invalid_request_error` naming the offending field in `param` and in the message, with the allowed
values where there is a list; the pydantic error type is the API's code. Fields outside the
declaration are dropped: only `ImageParams` is forwarded. The `model` field is resolved (and checked)
by `keys.group_access`; it is ignored here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NoReturn, Protocol, Self

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

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


def _refusal(message: str, *, code: str = "invalid_value") -> PydanticCustomError:
    # No context: the message is used as written, so braces echoed from the caller's value stay as sent.
    return PydanticCustomError(code, message)


class SpecField:
    """A spec field's rules, as the metadata of its annotation in `ImageRequest`: optional unless said
    otherwise; JSON null counts as absent, as upstream APIs read it.

    `requires` names the image model's flag without which the field is refused as unsupported;
    `operations` the endpoints that take it. The checks run in this order: the endpoint, the model's
    support, the JSON type (`typed`), the value (`check`).
    """

    expected = "a string"

    def __init__(
        self, *, requires: str | None = None, operations: tuple[Operation, ...] | None = None
    ) -> None:
        self.requires = requires
        self.operations = operations

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        # The annotated type is for readers: pydantic's own check of it would refuse a wrong JSON type
        # before the model's support for the field is checked, and in pydantic's words, not the API's.
        return core_schema.with_info_plain_validator_function(self.validate)

    def validate(self, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        assert info.context is not None and info.field_name is not None
        name, image_model = info.field_name, info.context["image_model"]
        if self.operations is not None and info.context["operation"] not in self.operations:
            raise _refusal(
                f"`{name}` applies only to image edits (/v1/images/edits); leave it out here.",
                code="unsupported_parameter",
            )
        if self.requires is not None and not getattr(image_model, self.requires):
            self.refuse_unsupported(name, image_model)
        return self.check(self.typed(value, name, image_model), name, image_model)

    def typed(self, value: Any, name: str, image_model: ImageCapabilities) -> Any:
        if not isinstance(value, str):
            self.refuse_type(value, name, image_model)
        return value

    def check(self, value: Any, name: str, image_model: ImageCapabilities) -> Any:
        return value

    def expected_for(self, image_model: ImageCapabilities) -> str:
        return self.expected

    def refuse_type(self, value: object, name: str, image_model: ImageCapabilities) -> NoReturn:
        raise _refusal(
            f"`{name}` must be {self.expected_for(image_model)}; got {_json_type(value)} {_echo(value)}.",
            code="invalid_type",
        )

    def refuse_unsupported(self, name: str, image_model: ImageCapabilities) -> NoReturn:
        raise _refusal(
            f"Model {image_model.model_id} does not support `{name}`; leave it out.",
            code="unsupported_parameter",
        )


class TextField(SpecField):
    def __init__(self, *, max_length: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_length = max_length

    def check(self, value: str, name: str, image_model: ImageCapabilities) -> str:
        if len(value) > self.max_length:
            raise _refusal(f"`{name}` must be at most {self.max_length} characters; got {len(value)}.")
        return value


class PromptField(SpecField):
    """Required, not blank, at most GATEWAY_MAX_PROMPT_CHARS characters."""

    def validate(self, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            raise _refusal(
                "`prompt` is required: a non-empty string describing the image.",
                code="missing_required_parameter",
            )
        return super().validate(value, info)

    def check(self, prompt: str, name: str, image_model: ImageCapabilities) -> str:
        if not prompt.strip():
            raise _refusal("`prompt` must not be empty.")
        limit = settings.GATEWAY_MAX_PROMPT_CHARS
        if len(prompt) > limit:
            raise _refusal(
                f"`prompt` is {len(prompt):,} characters long; at most {limit:,} are accepted.",
                code="string_above_max_length",
            )
        return prompt


class IntegerField(SpecField):
    """A JSON integer (`true` is not one, though Python's bool is an int); a form's digits."""

    expected = "an integer"

    def typed(self, value: Any, name: str, image_model: ImageCapabilities) -> Any:
        if not isinstance(value, int) or isinstance(value, bool):
            self.refuse_type(value, name, image_model)
        return value


class CountField(IntegerField):
    """`n`: at least 1, at most the model's max_n."""

    def check(self, n: int, name: str, image_model: ImageCapabilities) -> int:
        if n < 1:
            raise _refusal(f"`n` must be a positive integer (at least 1); got {n}.")
        if n > image_model.max_n:
            raise _refusal(
                f"`n` must be at most {image_model.max_n} for model {image_model.model_id}; got {n}."
            )
        return n


class CompressionField(IntegerField):
    """Within the model's output_compression_range; a model without one does not take the field."""

    def validate(self, value: Any, info: ValidationInfo) -> Any:
        assert info.context is not None and info.field_name is not None
        if value is not None and info.context["image_model"].output_compression_range is None:
            self.refuse_unsupported(info.field_name, info.context["image_model"])
        return super().validate(value, info)

    def check(self, compression: int, name: str, image_model: ImageCapabilities) -> int:
        assert image_model.output_compression_range is not None
        low, high = image_model.output_compression_range
        if not low <= compression <= high:
            raise _refusal(
                f"`{name}` must be between {low} and {high} for model {image_model.model_id}; "
                f"got {compression}."
            )
        return compression


class PartialImagesField(IntegerField):
    """Streamed partial images: only for a streaming model, 0 to PARTIAL_IMAGES_MAX."""

    def refuse_unsupported(self, name: str, image_model: ImageCapabilities) -> NoReturn:
        raise _refusal(
            f"Model {image_model.model_id} does not stream, so it does not support `partial_images`; "
            "leave it out.",
            code="unsupported_parameter",
        )

    def check(self, count: int, name: str, image_model: ImageCapabilities) -> int:
        if not 0 <= count <= PARTIAL_IMAGES_MAX:
            raise _refusal(f"`partial_images` must be between 0 and {PARTIAL_IMAGES_MAX}; got {count}.")
        return count


class StreamField(SpecField):
    """A JSON boolean; true only for a model that streams."""

    expected = "a boolean (true or false)"

    def typed(self, value: Any, name: str, image_model: ImageCapabilities) -> Any:
        if not isinstance(value, bool):
            self.refuse_type(value, name, image_model)
        return value

    def check(self, stream: bool, name: str, image_model: ImageCapabilities) -> bool:
        if stream and not image_model.stream_supported:
            raise _refusal(
                f"Model {image_model.model_id} does not support streaming; "
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

    def allowed(self, image_model: ImageCapabilities) -> tuple[str, ...]:
        return tuple(getattr(image_model, self.capability)) if self.capability else self.choices_fixed

    def expected_for(self, image_model: ImageCapabilities) -> str:
        return f"a string, one of: {', '.join(self.allowed(image_model))}"

    def validate(self, value: Any, info: ValidationInfo) -> Any:
        assert info.context is not None and info.field_name is not None
        image_model = info.context["image_model"]
        if value is not None and self.capability and not self.allowed(image_model):
            self.refuse_unsupported(info.field_name, image_model)
        return super().validate(value, info)

    def check(self, value: str, name: str, image_model: ImageCapabilities) -> str:
        allowed = self.allowed(image_model)
        if value not in allowed:
            for_model = f" for model {image_model.model_id}" if self.capability else ""
            raise _refusal(f"`{name}` must be one of {', '.join(allowed)}{for_model}; got {_echo(value)}.")
        return value


class SizeField(SpecField):
    """<width>x<height> (or auto) among the model's sizes."""

    expected = "a string such as 1024x1024"

    def validate(self, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        assert info.context is not None
        image_model = info.context["image_model"]
        size = self.typed(value, "size", image_model)
        allowed = tuple(image_model.sizes)
        model_id = image_model.model_id
        if not allowed:
            self.refuse_unsupported("size", image_model)
        if size != "auto" and not SIZE_PATTERN.fullmatch(size):
            raise _refusal(
                f"`size` must be <width>x<height> such as 1024x1024"
                f"{' or auto' if 'auto' in allowed else ''}; got {_echo(size)}. "
                f"Allowed for model {model_id}: {', '.join(allowed)}."
            )
        if size not in allowed:
            raise _refusal(
                f"`size` {_echo(size)} is not offered by model {model_id}; allowed: {', '.join(allowed)}."
            )
        return size


class ImageRequest(BaseModel):
    """The spec's fields of both image endpoints, checked in this order; the first refusal is answered.

    Context: `image_model` (the selected model's capabilities) and `operation` ("generate" or "edit").
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    # Absent and null alike reach the prompt's check, which refuses them as missing.
    prompt: Annotated[str, PromptField()] = Field(default=None, validate_default=True)
    n: Annotated[int | None, CountField()] = None
    size: Annotated[str | None, SizeField()] = None
    output_format: Annotated[str | None, ChoiceField(capability="output_formats")] = None
    response_format: Annotated[str | None, ChoiceField(choices=RESPONSE_FORMATS)] = None
    quality: Annotated[str | None, ChoiceField(capability="qualities")] = None
    style: Annotated[str | None, ChoiceField(capability="styles")] = None
    background: Annotated[str | None, ChoiceField(capability="backgrounds")] = None
    output_compression: Annotated[int | None, CompressionField()] = None
    moderation: Annotated[str | None, ChoiceField(choices=MODERATION_VALUES)] = None
    input_fidelity: Annotated[
        str | None, ChoiceField(choices=INPUT_FIDELITY_VALUES, operations=("edit",))
    ] = None
    partial_images: Annotated[int | None, PartialImagesField(requires="stream_supported")] = None
    user: Annotated[str | None, TextField(max_length=USER_MAX_CHARS)] = None
    stream: Annotated[bool | None, StreamField()] = None

    @model_validator(mode="after")
    def _combinations(self) -> Self:
        """The rules across fields; pydantic runs them only once every field has passed its own."""
        output_format = self.output_format
        if self.background == "transparent" and output_format not in (None, *TRANSPARENT_FORMATS):
            raise _combination_refusal(
                "background",
                f"`background` transparent needs output_format png or webp; "
                f"{output_format} has no transparency.",
            )
        if self.output_compression is not None and output_format not in COMPRESSIBLE_FORMATS:
            given = f"output_format is {output_format}" if output_format else "no output_format was given"
            raise _combination_refusal(
                "output_compression",
                "`output_compression` applies only with output_format "
                f"{' or '.join(COMPRESSIBLE_FORMATS)}; {given}.",
            )
        return self


def _combination_refusal(param: str, message: str) -> PydanticCustomError:
    # A model-level error has no location: the field it names travels in its context.
    return PydanticCustomError("invalid_value", message, {"param": param})


# The fields the pipeline forwards in `ImageParams` itself; the others go to its options.
_PARAMS_FIELDS = ("prompt", "n", "size", "response_format", "output_format")
# Each declared field's rules, in declaration order (also how a multipart form's text is read).
_SPEC: dict[str, SpecField] = {
    name: next(rule for rule in info.metadata if isinstance(rule, SpecField))
    for name, info in ImageRequest.model_fields.items()
}
# The spec's fields (plus `stream`, for streamed partial images). Anything else is dropped.
SPEC_FIELDS = ("model", *_SPEC)


def generation_params_validate(*, body: object, image_model: ImageCapabilities) -> ImageParams:
    """Validate a parsed JSON body of POST /v1/images/generations for `image_model`."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object; got a JSON {_json_type(body)}.",
            code="invalid_body",
        )
    return _params_validate(values=body, image_model=image_model, operation="generate")


@dataclass(frozen=True)
class EditUploads:
    """The file parts of an edit, checked for count and size but not yet read: `edit_uploads_decode`
    reads and decodes them (the expensive part, done after every cheap refusal)."""

    images: tuple[tuple[str, UploadedFile], ...]
    mask: UploadedFile | None


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
    return params, _uploads_collect(data=data, files=files)


def _params_validate(
    *, values: Mapping[str, Any], image_model: ImageCapabilities, operation: Operation
) -> ImageParams:
    try:
        request = ImageRequest.model_validate(
            values, context={"image_model": image_model, "operation": operation}
        )
    except ValidationError as exc:
        # The first field in declaration order with a refusal (each field reports one), or else the
        # first rule across fields.
        error = exc.errors(include_url=False, include_input=False)[0]
        param = error["loc"][0] if error["loc"] else error["ctx"]["param"]
        raise InvalidRequest(error["msg"], param=str(param), code=error["type"]) from None
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


# --- multipart forms ----------------------------------------------------------------------------------


def _form_values(*, data: QueryDict) -> dict[str, Any]:
    """The form's spec fields as JSON-like values: integers and booleans parsed strictly from text."""
    values: dict[str, Any] = {}
    for name, spec in _SPEC.items():
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


def _uploads_collect(*, data: QueryDict, files: MultiValueDict) -> EditUploads:
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
    return EditUploads(images=tuple(uploads), mask=masks[0] if masks else None)


def edit_uploads_decode(*, uploads: EditUploads) -> tuple[tuple[bytes, ...], bytes | None]:
    """Read and fully decode the images and the mask (400 on any that is not a valid image).

    CPU-bound (a 16-megapixel PNG takes a good part of a second): the pipeline runs it through
    core.offload.cpu_bound, after every cheap refusal. It touches no database."""
    images: list[bytes] = []
    first = None
    for name, upload in uploads.images:
        content = upload_read(uploaded=upload, param=name)
        checked = image_bytes_check(data=content, param=name)
        first = first or checked
        images.append(content)
    mask: bytes | None = None
    if uploads.mask is not None:
        assert first is not None
        mask = upload_read(uploaded=uploads.mask, param=MASK_FIELD)
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
