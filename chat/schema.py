"""The OpenAPI description of the text endpoints (api/openapi.py).

The gateway reads only `model`, `stream` and the family's output-limit fields (chat/validation.py);
everything else (messages, input, tools, future fields) goes upstream as sent, so the bodies are
declared with those fields and `additionalProperties`, and the answers, the upstream's own, as
free-form objects.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)

from api.openapi import (
    CALL_STATUSES,
    EVENT_STREAM,
    IDEMPOTENCY_KEY,
    READ_STATUSES,
    component_register,
    error_responses,
    free_form,
)
from chat.families import CHAT, COUNT_TOKENS, MESSAGES_FAMILY, PASSED_ERROR_SHAPES, RESPONSES_FAMILY, Family
from core.errors import Shape

_LIMIT = {
    "type": "integer",
    "minimum": 1,
    "description": "At most the model's `max_output_tokens` (the default when absent); the call's "
    "hold is computed from it.",
}
_PASSED_ON = "Fields the gateway does not read are passed upstream untouched; the answer is the upstream's."


def _request(family: Family, name: str, *, content: dict[str, Any], example: str) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "model": {
            "type": "string",
            "minLength": 1,
            "example": example,
            "description": "A text model id from GET /v1/models.",
        },
        **content,
    }
    if family.streams:
        properties["stream"] = {
            "type": "boolean",
            "default": False,
            "description": "Server-sent events, relayed as they arrive.",
        }
    for field in family.limit_fields:
        properties[field] = _LIMIT
    return component_register(
        name,
        {
            "type": "object",
            "required": ["model"],
            "properties": properties,
            "additionalProperties": True,
            "description": f"{family.path}. {_PASSED_ON}",
        },
    )


_MESSAGES_LIST = {
    "type": "array",
    "items": {"type": "object", "additionalProperties": True},
    "description": "As the provider defines it (role and content parts); passed on as sent.",
}

CHAT_REQUEST = _request(
    CHAT, "ChatCompletionRequest", content={"messages": _MESSAGES_LIST}, example="demo-chat"
)
RESPONSES_REQUEST = _request(
    RESPONSES_FAMILY,
    "ResponsesRequest",
    content={
        "input": {
            "description": "A string, or a list of input items as the provider defines them.",
            "anyOf": [{"type": "string"}, {"type": "array", "items": {}}],
        }
    },
    example="demo-chat",
)
MESSAGES_REQUEST = _request(
    MESSAGES_FAMILY, "MessagesRequest", content={"messages": _MESSAGES_LIST}, example="demo-claude"
)
COUNT_TOKENS_REQUEST = _request(
    COUNT_TOKENS, "CountTokensRequest", content={"messages": _MESSAGES_LIST}, example="demo-claude"
)
TEXT_ANSWER = component_register(
    "TextAnswer",
    free_form("The upstream's answer as it gave it (its `model` is the upstream's name)."),
)


def _text_schema(
    family: Family,
    *,
    operation_id: str,
    summary: str,
    request: dict[str, Any],
    shape: Shape,
    examples: list[OpenApiExample],
) -> Any:
    answers: dict[Any, OpenApiResponse] = {
        (200, "application/json"): OpenApiResponse(response=TEXT_ANSWER, description="The upstream's answer")
    }
    if family.streams:
        answers[200, "text/event-stream"] = OpenApiResponse(
            response=EVENT_STREAM, description="With `stream: true`: the upstream's events"
        )
    # The upstream's own 4xx about the request passes through in its shape (OpenAI's is the
    # compatible one).
    passthrough = PASSED_ERROR_SHAPES[shape]
    # A class decorator (the four views share TextView.post): per method, as drf-spectacular wants it.
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id,
            summary=summary,
            tags=["text"],
            request={"application/json": request},
            parameters=[IDEMPOTENCY_KEY],
            responses={
                **answers,
                **error_responses((shape,), CALL_STATUSES, passthrough=passthrough),
            },
            examples=examples,
        )
    )


_HELLO = [{"role": "user", "content": "Hello"}]

chat_completions_schema = _text_schema(
    CHAT,
    operation_id="chat_completions_create",
    summary="Chat completion (OpenAI style)",
    request=CHAT_REQUEST,
    shape="compatible",
    examples=[
        OpenApiExample(
            "Chat", value={"model": "demo-chat", "messages": _HELLO, "max_tokens": 64}, request_only=True
        ),
        OpenApiExample(
            "Streamed",
            value={"model": "demo-chat", "messages": _HELLO, "stream": True},
            request_only=True,
        ),
    ],
)
responses_schema = _text_schema(
    RESPONSES_FAMILY,
    operation_id="responses_create",
    summary="Response (OpenAI Responses style)",
    request=RESPONSES_REQUEST,
    shape="compatible",
    examples=[
        OpenApiExample(
            "Response",
            value={"model": "demo-chat", "input": "Hello", "max_output_tokens": 64},
            request_only=True,
        )
    ],
)
messages_schema = _text_schema(
    MESSAGES_FAMILY,
    operation_id="messages_create",
    summary="Message (Anthropic style)",
    request=MESSAGES_REQUEST,
    shape="native",
    examples=[
        OpenApiExample(
            "Message",
            value={"model": "demo-claude", "max_tokens": 256, "messages": _HELLO},
            request_only=True,
        ),
        OpenApiExample(
            "Streamed",
            value={"model": "demo-claude", "max_tokens": 256, "messages": _HELLO, "stream": True},
            request_only=True,
        ),
    ],
)
count_tokens_schema = _text_schema(
    COUNT_TOKENS,
    operation_id="messages_count_tokens",
    summary="Count a message's input tokens (Anthropic style; free)",
    request=COUNT_TOKENS_REQUEST,
    shape="native",
    examples=[OpenApiExample("Count", value={"model": "demo-claude", "messages": _HELLO}, request_only=True)],
)

_RESPONSE_ID = OpenApiParameter(
    "response_id",
    str,
    OpenApiParameter.PATH,
    description="The id of a response the gateway kept: an answer of a model it translates, made with "
    "`store` not false, within GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS of its conversation's last response.",
)
KEPT_RESPONSE = component_register(
    "KeptResponse",
    {
        "type": "object",
        "required": ["id", "object", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["response"]},
            "output": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
        },
        "additionalProperties": True,
        "description": "The response object as its caller got it.",
    },
)
RESPONSE_DELETED = component_register(
    "ResponseDeleted",
    {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string", "enum": ["response.deleted"]},
            "deleted": {"type": "boolean", "enum": [True]},
        },
    },
)
kept_response_schema = extend_schema_view(
    get=extend_schema(
        operation_id="responses_retrieve",
        summary="A response the gateway kept (a translated model's)",
        tags=["text"],
        parameters=[_RESPONSE_ID],
        responses={
            200: OpenApiResponse(response=KEPT_RESPONSE, description="The response"),
            **error_responses(("compatible",), READ_STATUSES),
        },
    ),
    delete=extend_schema(
        operation_id="responses_delete",
        summary="Delete a response the gateway kept, and its items",
        tags=["text"],
        parameters=[_RESPONSE_ID],
        responses={
            200: OpenApiResponse(response=RESPONSE_DELETED, description="Deleted"),
            **error_responses(("compatible",), READ_STATUSES),
        },
    ),
)
