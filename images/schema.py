"""The OpenAPI description of POST /v1/images/generations and /v1/images/edits (api/openapi.py).

The fields are `images.validation.ImageRequest`'s; what a model allows of each (sizes, qualities,
formats, n) is its configuration's, so only the JSON types and the fixed values are declared here.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema

from api.openapi import (
    CALL_STATUSES,
    EVENT_STREAM,
    IDEMPOTENCY_KEY,
    component_register,
    error_responses,
)
from images.models import RESPONSE_FORMATS
from images.validation import INPUT_FIDELITY_VALUES, MODERATION_VALUES, PARTIAL_IMAGES_MAX, USER_MAX_CHARS

# The fields both endpoints take besides the prompt and the files (JSON null counts as absent).
_OPTIONS: dict[str, dict[str, Any]] = {
    "n": {"type": "integer", "minimum": 1, "default": 1, "description": "At most the model's `max_n`."},
    "size": {
        "type": "string",
        "example": "1024x1024",
        "description": "`<width>x<height>` (or `auto`), one of the model's sizes.",
    },
    "quality": {"type": "string", "description": "One of the model's qualities (e.g. standard, hd)."},
    "style": {"type": "string", "description": "One of the model's styles."},
    "background": {"type": "string", "description": "One of the model's backgrounds (transparent, opaque)."},
    "output_format": {"type": "string", "description": "One of the model's formats (png, jpeg, webp)."},
    "output_compression": {
        "type": "integer",
        "description": "Within the model's range; only with `output_format` jpeg or webp.",
    },
    "response_format": {
        "type": "string",
        "enum": list(RESPONSE_FORMATS),
        "description": "Default: the model's.",
    },
    "user": {"type": "string", "maxLength": USER_MAX_CHARS},
    "moderation": {"type": "string", "enum": list(MODERATION_VALUES)},
    "stream": {
        "type": "boolean",
        "description": "`true` only for a model that streams: the answer is a `text/event-stream` of "
        "partial and completed images.",
    },
    "partial_images": {"type": "integer", "minimum": 0, "maximum": PARTIAL_IMAGES_MAX},
}
_MODEL = {
    "type": "string",
    "description": "An image model id from GET /v1/models.",
    "example": "alpha-image-2",
}
_PROMPT = {"type": "string", "minLength": 1, "example": "a lighthouse at dawn"}

GENERATION_REQUEST = component_register(
    "ImageGenerationRequest",
    {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {"model": _MODEL, "prompt": _PROMPT, **_OPTIONS},
        "additionalProperties": True,
        "description": "Fields outside these are accepted and dropped before forwarding.",
    },
)
_BINARY = {"type": "string", "format": "binary"}
EDIT_REQUEST = component_register(
    "ImageEditRequest",
    {
        "type": "object",
        "required": ["model", "prompt", "image"],
        "properties": {
            "model": _MODEL,
            "prompt": _PROMPT,
            "image": {**_BINARY, "description": "PNG, JPEG or WebP (decided by the bytes)."},
            "image[]": {
                "type": "array",
                "items": _BINARY,
                "description": "Several images, in order (instead of `image`).",
            },
            "mask": {
                **_BINARY,
                "description": "PNG with an alpha channel, the first image's size; its transparent "
                "region is replaced.",
            },
            **_OPTIONS,
            "input_fidelity": {"type": "string", "enum": list(INPUT_FIDELITY_VALUES)},
        },
    },
)

IMAGE_ITEM = component_register(
    "ImageItem",
    {
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "description": "With response_format url: a signed, expiring link that needs no key.",
            },
            "b64_json": {"type": "string", "description": "With response_format b64_json."},
            "revised_prompt": {"type": "string"},
        },
    },
)
IMAGE_RESULT = component_register(
    "ImageResult",
    {
        "type": "object",
        "required": ["created", "data"],
        "properties": {
            "created": {"type": "integer", "description": "Unix seconds."},
            "data": {"type": "array", "items": IMAGE_ITEM},
            "usage": {"type": "object", "additionalProperties": True},
        },
        "example": {"created": 1767225600, "data": [{"b64_json": "iVBORw0KGgo…"}]},
    },
)

_ANSWERS = {
    (200, "application/json"): OpenApiResponse(response=IMAGE_RESULT, description="The images"),
    (200, "text/event-stream"): OpenApiResponse(
        response=EVENT_STREAM,
        description="With `stream: true`: `image_generation.partial_image` (`image_edit.…`) events, "
        "then the completed ones",
    ),
    # Image errors are the compatible shape; an upstream speaking Google's passes its 4xx through.
    **error_responses(("compatible",), CALL_STATUSES, passthrough=("google",)),
}

generation_schema = extend_schema(
    operation_id="images_generate",
    summary="Generate images from a prompt",
    description="Each field is checked against the model's capabilities (400 naming it); other fields "
    "are dropped. A fixed price per successful call. docs/images.md",
    tags=["images"],
    request={"application/json": GENERATION_REQUEST},
    parameters=[IDEMPOTENCY_KEY],
    responses=_ANSWERS,
    examples=[
        OpenApiExample(
            "Two images",
            value={"model": "alpha-image-2", "prompt": "a red fox", "n": 2, "size": "1024x1024"},
            request_only=True,
        ),
        OpenApiExample(
            "As a link",
            value={"model": "alpha-image-2", "prompt": "a lighthouse at dawn", "response_format": "url"},
            request_only=True,
        ),
    ],
)

edit_schema = extend_schema(
    operation_id="images_edit",
    summary="Edit an uploaded image",
    description="multipart/form-data: the generation's fields, `image` (or repeated `image[]`) and an "
    "optional `mask`. docs/images.md",
    tags=["images"],
    request={"multipart/form-data": EDIT_REQUEST},
    parameters=[IDEMPOTENCY_KEY],
    responses=_ANSWERS,
)
