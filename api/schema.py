"""The OpenAPI description of GET /v1/models, /v1/models/{model_id} and /v1/me (api/views.py)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from api.openapi import READ_STATUSES, component_register, error_responses

_GROUP = {
    "type": "object",
    "required": ["id", "name"],
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
}
MODEL = component_register(
    "Model",
    {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": {"type": "string", "description": "What `model` is set to, to use it."},
            "object": {"type": "string", "enum": ["model"]},
            "created": {"type": "integer", "description": "Unix seconds."},
            "owned_by": {"type": "string", "description": "The group's name."},
            "group": {**_GROUP, "description": "With `groups=all` only."},
            "selectable": {
                "type": "boolean",
                "description": "With `groups=all` only: false for a group no request can select.",
            },
        },
    },
)
MODEL_LIST = component_register(
    "ModelList",
    {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": MODEL},
        },
        "example": {
            "object": "list",
            "data": [
                {"id": "alpha-image-2", "object": "model", "created": 1767225600, "owned_by": "Alpha-Image"}
            ],
        },
    },
)
ANTHROPIC_MODEL = component_register(
    "AnthropicModel",
    {
        "type": "object",
        "required": ["type", "id", "display_name", "created_at"],
        "properties": {
            "type": {"type": "string", "enum": ["model"]},
            "id": {"type": "string"},
            "display_name": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "lifecycle": {"type": "string"},
        },
    },
)
ANTHROPIC_MODEL_LIST = component_register(
    "AnthropicModelList",
    {
        "type": "object",
        "required": ["data", "has_more", "first_id", "last_id"],
        "properties": {
            "data": {"type": "array", "items": ANTHROPIC_MODEL},
            "has_more": {"type": "boolean"},
            "first_id": {"type": "string", "nullable": True},
            "last_id": {"type": "string", "nullable": True},
        },
    },
)

_MONEY = {
    "type": "string",
    "description": "Decimal with 8 places, e.g. `10.00000000`.",
    "example": "10.00000000",
}
_GROUP_DETAIL = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "status": {"type": "string"},
        "billing": {"type": "string"},
        "image_enabled": {"type": "boolean"},
        "allow_group_override": {"type": "boolean"},
    },
}
_TOTALS = {
    "type": "object",
    "properties": {
        "calls": {"type": "integer"},
        "amount": _MONEY,
        "input_tokens": {"type": "integer"},
        "cached_tokens": {"type": "integer"},
        "cache_write_tokens": {"type": "integer"},
        "output_tokens": {"type": "integer"},
    },
}
ME = component_register(
    "Me",
    {
        "type": "object",
        "required": ["object", "credential"],
        "description": "Each part as the credential's scopes allow; a manual API key sees all of them.",
        "properties": {
            "object": {"type": "string", "enum": ["me"]},
            "credential": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"type": "string", "enum": ["api_key", "oauth"]},
                    "label": {"type": "string"},
                    "group": {**_GROUP, "nullable": True, "description": "API keys: the bound group."},
                    "scopes": {"type": "array", "items": {"type": "string"}, "description": "OAuth tokens."},
                    "limits": {
                        "type": "object",
                        "description": "API keys: the key's own limits; null (or empty) where unset.",
                        "properties": {
                            "budget": {**_MONEY, "nullable": True},
                            "budget_period": {
                                "type": "string",
                                "enum": ["daily", "weekly", "monthly", "total"],
                                "nullable": True,
                            },
                            "models": {"type": "array", "items": {"type": "string"}},
                            "rpm": {"type": "integer", "nullable": True},
                            "tpm": {"type": "integer", "nullable": True},
                            "allowed_ips": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "budget_window": {
                        "type": "object",
                        "nullable": True,
                        "description": "API keys with a budget: its current window (GATEWAY_TIMEZONE) "
                        "and its spend, calls in flight included; null without a budget.",
                        "properties": {
                            "start": {"type": "string", "format": "date-time"},
                            "end": {
                                "type": "string",
                                "format": "date-time",
                                "nullable": True,
                                "description": "null for the total budget, which never resets.",
                            },
                            "used": _MONEY,
                            "remaining": _MONEY,
                        },
                    },
                },
            },
            "user": {
                "type": "object",
                "description": "profile:read",
                "properties": {
                    "id": {"type": "integer"},
                    "username": {"type": "string"},
                    "email": {"type": "string"},
                    "date_joined": {"type": "string", "format": "date-time"},
                },
            },
            "account": {
                "type": "object",
                "description": "account:read",
                "properties": {
                    "id": {"type": "integer"},
                    "created_at": {"type": "string", "format": "date-time"},
                },
            },
            "current_group": {**_GROUP_DETAIL, "nullable": True, "description": "account:read"},
            "allowed_groups": {"type": "array", "items": _GROUP_DETAIL, "description": "account:read"},
            "currency": {"type": "string", "example": "CNY", "description": "account:balance:read"},
            "balance": _MONEY,
            "balance_held": _MONEY,
            "balance_available": _MONEY,
            "usage": {
                "type": "object",
                "description": "account:balance:read",
                "properties": {"today": _TOTALS, "this_month": _TOTALS},
            },
        },
    },
)

ANTHROPIC_VERSION = OpenApiParameter(
    name="anthropic-version",
    location=OpenApiParameter.HEADER,
    required=False,
    type=str,
    description="Present (any value, as Anthropic's SDKs send it): answers and errors in Anthropic's shapes.",
)
# The model endpoints answer in the shape the caller picks, errors included.
_MODEL_ERRORS = error_responses(("compatible", "native"), READ_STATUSES)

model_list_schema = extend_schema(
    operation_id="models_list",
    summary="The models the credential may use",
    tags=["models"],
    parameters=[
        ANTHROPIC_VERSION,
        OpenApiParameter(
            "groups",
            str,
            enum=["all"],
            description="OAuth tokens with models:invoke: every allowed group's models.",
        ),
        OpenApiParameter("limit", int, description="Anthropic's shape: page size, 1 to 1000 (20)."),
        OpenApiParameter("after_id", str, description="Anthropic's shape: the page after this id."),
        OpenApiParameter("before_id", str, description="Anthropic's shape: the page before this id."),
    ],
    responses={
        200: OpenApiResponse(
            response={"oneOf": [MODEL_LIST, ANTHROPIC_MODEL_LIST]},
            description="ModelList; AnthropicModelList with `anthropic-version`",
        ),
        **_MODEL_ERRORS,
    },
)
model_detail_schema = extend_schema(
    operation_id="models_retrieve",
    summary="One model the credential may use",
    tags=["models"],
    parameters=[
        ANTHROPIC_VERSION,
        OpenApiParameter(
            "model_id",
            str,
            OpenApiParameter.PATH,
            description="An id GET /v1/models lists (`<group_id>:<model>` included).",
        ),
    ],
    responses={
        200: OpenApiResponse(
            response={"oneOf": [MODEL, ANTHROPIC_MODEL]},
            description="Model; AnthropicModel with `anthropic-version`",
        ),
        **_MODEL_ERRORS,
    },
)
me_schema = extend_schema(
    operation_id="me_retrieve",
    summary="Who the credential acts for",
    tags=["account"],
    responses={
        200: OpenApiResponse(response=ME, description="The parts the credential's scopes allow"),
        **error_responses(("compatible",), READ_STATUSES),
    },
)
