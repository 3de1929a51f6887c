"""The OpenAPI 3 description of /v1 (drf-spectacular): what every family shares.

The views take no DRF serializers (bodies are checked by pydantic models, core/validation.py), so
each family declares its bodies and answers as JSON Schema in its own `schema.py`, registers the
named ones here (`component_register`), and annotates its views with `extend_schema`. This module
holds the three error shapes (core/errors.py), the security schemes of the credential headers
(api/authentication.py), the error answers per status, and the view that serves the document.
"""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.renderers import OpenApiJsonRenderer2
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny

from core.errors import Shape

API_PREFIX = "/v1/"

# Named schemas (`#/components/schemas/<name>`), added to the document by `components_add`.
_COMPONENTS: dict[str, dict[str, Any]] = {}


def component_register(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Name a schema; returns the `$ref` that points at it."""
    _COMPONENTS[name] = schema
    return ref(name)


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


# --- the error shapes (core/errors.py) -------------------------------------------------------------

COMPATIBLE_ERROR = component_register(
    "CompatibleError",
    {
        "type": "object",
        "description": "The compatible shape: /v1/images/*, /v1/chat/completions, /v1/responses, "
        "/v1/models, /v1/me. Branch on the HTTP status first; `code` names the case.",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "code"],
                "properties": {
                    "message": {"type": "string", "description": "Ends with `(request id: …)`."},
                    "type": {"type": "string", "example": "invalid_request_error"},
                    "param": {"type": "string", "nullable": True},
                    "code": {"type": "string", "nullable": True, "example": "model_not_found"},
                },
            }
        },
        "example": {
            "error": {
                "message": "`n` must be an integer; got string '2'. (request id: req_…)",
                "type": "invalid_request_error",
                "param": "n",
                "code": "invalid_type",
            }
        },
    },
)
NATIVE_ERROR = component_register(
    "NativeError",
    {
        "type": "object",
        "description": "Anthropic's shape: /v1/messages, /v1/messages/count_tokens, and /v1/models* "
        "asked with an `anthropic-version` header. The business code prefixes the message and comes "
        "in the `x-error-code` header.",
        "required": ["type", "error"],
        "properties": {
            "type": {"type": "string", "enum": ["error"]},
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {
                    "type": {"type": "string", "example": "not_found_error"},
                    "message": {"type": "string"},
                },
            },
        },
        "example": {
            "type": "error",
            "error": {
                "type": "not_found_error",
                "message": "model_not_found: The model 'x' does not exist … (request id: req_…)",
            },
        },
    },
)
GOOGLE_ERROR = component_register(
    "GoogleError",
    {
        "type": "object",
        "description": "The second native shape, passed through from an upstream that speaks it "
        "(`status` in lowercase).",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "status"],
                "properties": {
                    "code": {"type": "integer", "example": 400},
                    "message": {"type": "string"},
                    "status": {"type": "string", "example": "invalid_argument"},
                },
            }
        },
        "example": {"error": {"code": 400, "message": "Invalid size.", "status": "invalid_argument"}},
    },
)
SHAPE_SCHEMAS: dict[Shape, dict[str, Any]] = {
    "compatible": COMPATIBLE_ERROR,
    "native": NATIVE_ERROR,
    "google": GOOGLE_ERROR,
}

# What each status means, as docs/authentication.md, docs/images.md, docs/text.md and
# docs/billing.md list them.
STATUS_MEANING = {
    400: "Malformed body, missing or invalid field, `?key=` in the query, two different credentials, "
    "`GROUP_UNAVAILABLE`; or an upstream's 400 about the request, passed through",
    401: "No credential, or an invalid, revoked or expired one",
    403: "The credential's group or scope does not allow this (`GROUP_*`, `model_not_allowed`, "
    "`image_group_required`, `insufficient_scope`, `SUBSCRIPTION_*`), or `INSUFFICIENT_BALANCE`",
    404: "The model does not exist (or the upstream says so)",
    409: "`GROUP_OVERRIDE_UNSUPPORTED`, or `idempotency_key_in_use`",
    413: "The body (or an uploaded file) is too large",
    415: "The body's Content-Type is not one the endpoint reads (`unsupported_content_type`)",
    422: "`idempotency_key_reused` with another body, or an upstream's 422 passed through",
    429: "Rate or concurrency limit, `USAGE_LIMIT_EXCEEDED`, or the upstream's rate limit (`Retry-After`)",
    500: "Internal error (logged; no traceback in the answer)",
    502: "The upstreams failed (after the gateway's retries)",
    503: "Every upstream's circuit is open, the upstream is overloaded, or limits are unavailable "
    "(`Retry-After`)",
    504: "The upstream timed out",
}
# The statuses of a billed call (a model invocation), and of the read-only endpoints.
CALL_STATUSES = (400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)
READ_STATUSES = (400, 401, 403, 404, 500)
# The statuses at which an upstream's own error body is passed through in its shape.
PASSTHROUGH_STATUSES = (400, 404, 413, 422)


def error_responses(
    shapes: tuple[Shape, ...], statuses: tuple[int, ...], *, passthrough: tuple[Shape, ...] = ()
) -> dict[int, OpenApiResponse]:
    """The error answers of an operation: each status in `shapes` (any of them, when the request
    picks one), plus the `passthrough` shapes where an upstream's 4xx about the request passes
    through."""
    answers = {}
    for status in statuses:
        names = list(shapes) + [s for s in passthrough if status in PASSTHROUGH_STATUSES and s not in shapes]
        schemas = [SHAPE_SCHEMAS[name] for name in names]
        schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
        answers[status] = OpenApiResponse(response=schema, description=STATUS_MEANING[status])
    return answers


# --- requests shared by the families -----------------------------------------------------------------

IDEMPOTENCY_KEY = OpenApiParameter(
    name="Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=False,
    type=str,
    description="The same key and body within 24 h replay the first answer (`Idempotent-Replayed: "
    "true`) with no second upstream call or charge; 1 to 255 printable ASCII characters. Not with "
    "`stream: true`.",
)


def free_form(description: str) -> dict[str, Any]:
    """An object whose fields the gateway does not look at (passed on as sent)."""
    return {"type": "object", "additionalProperties": True, "description": description}


EVENT_STREAM = component_register(
    "EventStream",
    {
        "type": "object",
        "description": "One server-sent event of a `text/event-stream` (its `event:` and `data:` lines), "
        "relayed as it arrives; a failed stream ends with an `error` event in the family's shape.",
        "properties": {
            "event": {"type": "string", "example": "message_start"},
            "data": {"type": "string", "description": "Usually JSON; `[DONE]` ends a chat stream."},
            "id": {"type": "string"},
            "retry": {"type": "integer"},
        },
    },
)


# --- security -------------------------------------------------------------------------------------


class CredentialAuthenticationScheme(OpenApiAuthenticationExtension):
    """api.authentication.CredentialAuthentication: one of three headers (not all of them)."""

    target_class = "api.authentication.CredentialAuthentication"
    name: ClassVar[list[str]] = ["bearerAuth", "apiKeyAuth", "googApiKeyAuth"]

    def get_security_requirement(self, auto_schema: Any) -> list[dict[str, list[str]]]:
        # Any one header is enough: one requirement per scheme (OpenAPI ORs the list's items).
        return [{name: []} for name in self.name]

    def get_security_definition(self, auto_schema: Any) -> list[dict[str, Any]]:
        return [
            {
                "type": "http",
                "scheme": "bearer",
                "description": "`Authorization: Bearer <API_KEY>` (recommended) for an API key "
                "(`sk-…`) or an OAuth access token (`sk_oauth_…`).",
            },
            {
                "type": "apiKey",
                "in": "header",
                "name": "x-api-key",
                "description": "An API key, for clients of Anthropic's style.",
            },
            {
                "type": "apiKey",
                "in": "header",
                "name": "x-goog-api-key",
                "description": "An API key, for clients of Google's style.",
            },
        ]


# --- the document ------------------------------------------------------------------------------------


def endpoints_v1_only(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """drf-spectacular's preprocessing hook: the /v1 API only (not the console or the OAuth pages)."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith(API_PREFIX)]


def components_add(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular's postprocessing hook: the families' named schemas."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name in sorted(_COMPONENTS):
        schemas.setdefault(name, _COMPONENTS[name])
    return result


class OpenApiSchemaView(SpectacularAPIView):
    """GET /v1/openapi.json: the document, to anyone (it describes the API, not an account)."""

    authentication_classes: ClassVar[list[type]] = []
    permission_classes: ClassVar[list[type]] = [AllowAny]
    renderer_classes: ClassVar[list[type]] = [OpenApiJsonRenderer2]  # application/json

    @extend_schema(
        operation_id="openapi_schema",
        summary="This document",
        tags=["meta"],
        auth=[],
        responses={
            200: OpenApiResponse(
                response={"type": "object", "additionalProperties": True}, description="OpenAPI 3"
            ),
            500: error_responses(("compatible",), (500,))[500],
        },
        examples=[],
    )
    def get(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)
