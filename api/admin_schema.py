"""The OpenAPI description of the staff provisioning API, /v1/admin/... (api/admin.py)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from api.openapi import IDEMPOTENCY_KEY, component_register, error_responses

_MONEY = {"type": "string", "example": "10.00000000", "description": "Decimal, 8 places."}
_MOMENT = {"type": "string", "format": "date-time", "nullable": True}
_GROUP_REF = {
    "oneOf": [{"type": "integer"}, {"type": "string"}],
    "description": "A group's id or its name.",
}
_TAGS = ["admin"]
_SUMMARY_SUFFIX = " (staff: an API key of a staff user, or a staff token with admin:provision)"

ADMIN_ACCOUNT_CREATE = component_register(
    "AdminAccountCreateRequest",
    {
        "type": "object",
        "required": ["username"],
        "properties": {
            "username": {"type": "string", "maxLength": 150, "pattern": r"^[\w.@+-]+$"},
            "email": {"type": "string", "format": "email"},
            "groups": {"type": "array", "items": _GROUP_REF, "description": "The groups it may use."},
            "current_group": {**_GROUP_REF, "description": "One of `groups`; default: the first."},
        },
        "example": {"username": "team-a", "email": "a@example.com", "groups": [1, "Beta-API"]},
    },
)
ADMIN_ACCOUNT = component_register(
    "AdminAccount",
    {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["account"]},
            "id": {"type": "integer"},
            "username": {"type": "string"},
            "email": {"type": "string"},
            "groups": {"type": "array", "items": {"type": "integer"}},
            "current_group": {"type": "integer", "nullable": True},
            "created_at": _MOMENT,
        },
    },
)
# A key's own limits (docs/authentication.md, "Key limits"): each optional, null = no limit.
_LIMIT_PROPERTIES = {
    "budget": {
        "type": "string",
        "nullable": True,
        "example": "5.00",
        "description": "The most the key may spend per `budget_period`, as a string; with a period.",
    },
    "budget_period": {
        "type": "string",
        "nullable": True,
        "enum": ["daily", "weekly", "monthly", "total", None],
        "description": "The budget's window, in the gateway's time zone; with a budget.",
    },
    "models": {
        "type": "array",
        "items": {"type": "string"},
        "maxItems": 100,
        "nullable": True,
        "description": "Model ids of the key's group it may call; empty (or null): all of them.",
    },
    "rpm": {"type": "integer", "minimum": 1, "nullable": True, "description": "Requests per minute."},
    "tpm": {
        "type": "integer",
        "minimum": 1,
        "nullable": True,
        "description": "Tokens (input + output) per minute of text calls.",
    },
    "allowed_ips": {
        "type": "array",
        "items": {"type": "string", "example": "10.0.0.0/8"},
        "maxItems": 100,
        "nullable": True,
        "description": "CIDR networks or addresses the caller must call from; empty (or null): any.",
    },
}
ADMIN_KEY_CREATE = component_register(
    "AdminKeyCreateRequest",
    {
        "type": "object",
        "required": ["group"],
        "properties": {
            "group": {**_GROUP_REF, "description": "One of the account's groups: the key's group."},
            "label": {"type": "string", "maxLength": 100},
            "expires_at": {**_MOMENT, "description": "In the future; none: never expires."},
            **_LIMIT_PROPERTIES,
        },
        "example": {
            "group": "Alpha-Image",
            "label": "ci",
            "budget": "5.00",
            "budget_period": "monthly",
            "models": ["alpha-image-2"],
            "rpm": 60,
        },
    },
)
ADMIN_KEY_LIMITS = component_register(
    "AdminKeyLimitsRequest",
    {
        "type": "object",
        "description": (
            "The limits to change: a field left out keeps its value, a field sent as null is unset "
            "(a null `budget` unsets its period too)."
        ),
        "properties": _LIMIT_PROPERTIES,
        "example": {"budget": "20.00", "rpm": None, "allowed_ips": ["10.0.0.0/8"]},
    },
)
_KEY_PROPERTIES = {
    "object": {"type": "string", "enum": ["api_key"]},
    "id": {"type": "integer"},
    "account_id": {"type": "integer"},
    "prefix": {"type": "string", "description": "The display prefix, e.g. `sk-abc12345`; never the secret."},
    "label": {"type": "string"},
    "group": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}},
    "created_at": _MOMENT,
    "last_used_at": _MOMENT,
    "expires_at": _MOMENT,
    "revoked_at": _MOMENT,
    "state": {"type": "string", "enum": ["active", "expired", "revoked"]},
    **_LIMIT_PROPERTIES,
}
ADMIN_KEY = component_register("AdminApiKey", {"type": "object", "properties": _KEY_PROPERTIES})
ADMIN_KEY_CREATED = component_register(
    "AdminApiKeyCreated",
    {
        "type": "object",
        "properties": {
            **_KEY_PROPERTIES,
            "key": {"type": "string", "description": "The secret: in this answer only, store it now."},
        },
    },
)
ADMIN_KEY_REVOKED = component_register(
    "AdminApiKeyRevoked",
    {
        "type": "object",
        "properties": {
            **_KEY_PROPERTIES,
            "revoked": {"type": "boolean", "description": "False: it already was revoked."},
        },
    },
)
ADMIN_KEY_LIST = component_register(
    "AdminApiKeyList",
    {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": ADMIN_KEY},
        },
    },
)
ADMIN_TOPUP = component_register(
    "AdminTopUpRequest",
    {
        "type": "object",
        "required": ["amount", "note"],
        "properties": {
            "amount": {"type": "string", "example": "10.00", "description": "Positive, as a string."},
            "note": {"type": "string", "description": "Why; kept on the ledger entry."},
            "reference": {"type": "string", "maxLength": 200, "description": "E.g. an invoice number."},
        },
    },
)
ADMIN_LEDGER_ENTRY = component_register(
    "AdminLedgerEntry",
    {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["ledger_entry"]},
            "id": {"type": "integer"},
            "account_id": {"type": "integer"},
            "kind": {"type": "string", "enum": ["top_up"]},
            "amount": _MONEY,
            "balance_after": _MONEY,
            "reference": {"type": "string"},
            "note": {"type": "string"},
            "created_by": {"type": "string", "description": "The staff user's username."},
            "created_at": _MOMENT,
        },
    },
)
ADMIN_USAGE = component_register(
    "AdminUsage",
    {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["usage"]},
            "account_id": {"type": "integer"},
            "from": {"type": "string", "format": "date-time"},
            "to": {"type": "string", "format": "date-time"},
            "totals": {
                "type": "object",
                "properties": {
                    "calls": {"type": "integer"},
                    "amount": _MONEY,
                    "input_tokens": {"type": "integer"},
                    "cached_tokens": {"type": "integer"},
                    "cache_write_tokens": {"type": "integer"},
                    "output_tokens": {"type": "integer"},
                },
            },
            "data": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
            "has_more": {"type": "boolean"},
            "next_before_id": {"type": "integer", "nullable": True},
        },
    },
)

# An account's alerts (docs/billing.md, "Alerts").
_ALERT_PROPERTIES = {
    "balance_floor": {
        "type": "string",
        "nullable": True,
        "example": "2.50",
        "description": "An event when a charge leaves the available balance below it; null: none.",
    },
    "percentages": {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 100},
        "description": "Of each key budget and subscription cap: an event once per window at each.",
    },
    "webhook_url": {
        "type": "string",
        "description": 'Where events are posted, signed (request-forgery rules apply); "": none.',
    },
    "email_enabled": {"type": "boolean", "description": "Whether events are emailed to the account."},
}
ADMIN_ALERTS_SET = component_register(
    "AdminAlertSettingsRequest",
    {
        "type": "object",
        "description": (
            "The settings to change: a field left out keeps its value, a field sent as null takes its "
            "default (no floor, no percentage, no webhook, email on)."
        ),
        "properties": _ALERT_PROPERTIES,
        "example": {
            "balance_floor": "2.50",
            "percentages": [80, 100],
            "webhook_url": "https://ops.example/hook",
        },
    },
)
ADMIN_ALERTS = component_register(
    "AdminAlertSettings",
    {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["alert_settings"]},
            "account_id": {"type": "integer"},
            **_ALERT_PROPERTIES,
            "webhook_secret_set": {"type": "boolean"},
            "webhook_secret": {
                "type": "string",
                "description": "Only in the answer that made it (a URL set where there was none), once.",
            },
        },
    },
)
_ACCOUNT_ID = OpenApiParameter("account_id", int, OpenApiParameter.PATH, description="The account's id.")
_KEY_ID = OpenApiParameter("key_id", int, OpenApiParameter.PATH, description="The API key's id.")
_WRITE_STATUSES = (400, 401, 403, 404, 500)


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return error_responses(("compatible",), tuple(sorted(set(_WRITE_STATUSES) | set(statuses))))


account_create_schema = extend_schema(
    operation_id="admin_accounts_create",
    summary="Create an account" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    request={"application/json": ADMIN_ACCOUNT_CREATE},
    responses={201: OpenApiResponse(response=ADMIN_ACCOUNT, description="Created"), **_errors(409)},
)
key_list_schema = extend_schema(
    operation_id="admin_account_keys_list",
    summary="An account's API keys, never their secrets" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    parameters=[_ACCOUNT_ID],
    responses={200: OpenApiResponse(response=ADMIN_KEY_LIST, description="Newest first"), **_errors()},
)
key_create_schema = extend_schema(
    operation_id="admin_account_keys_create",
    summary="Create an API key for an account" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    parameters=[_ACCOUNT_ID],
    request={"application/json": ADMIN_KEY_CREATE},
    responses={201: OpenApiResponse(response=ADMIN_KEY_CREATED, description="The secret, once"), **_errors()},
)
key_limits_schema = extend_schema(
    operation_id="admin_keys_limits_update",
    summary="Change an API key's limits" + _SUMMARY_SUFFIX,
    description="From the key's next call on, on every process of the gateway.",
    tags=_TAGS,
    parameters=[_KEY_ID],
    request={"application/json": ADMIN_KEY_LIMITS},
    responses={200: OpenApiResponse(response=ADMIN_KEY, description="The key, changed"), **_errors()},
)
key_revoke_schema = extend_schema(
    operation_id="admin_keys_revoke",
    summary="Revoke an API key" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    parameters=[_KEY_ID],
    request=None,
    responses={200: OpenApiResponse(response=ADMIN_KEY_REVOKED, description="Revoked"), **_errors()},
)
topup_schema = extend_schema(
    operation_id="admin_account_topups_create",
    summary="Top up an account's wallet" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    parameters=[_ACCOUNT_ID, IDEMPOTENCY_KEY],
    request={"application/json": ADMIN_TOPUP},
    responses={
        201: OpenApiResponse(response=ADMIN_LEDGER_ENTRY, description="The ledger entry"),
        **_errors(409, 422),
    },
)
usage_schema = extend_schema(
    operation_id="admin_account_usage_retrieve",
    summary="An account's usage: totals and records" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    parameters=[
        _ACCOUNT_ID,
        OpenApiParameter(
            "from", str, description="ISO 8601 date or date-time, inclusive (default: `to` minus 30 days)."
        ),
        OpenApiParameter("to", str, description="ISO 8601 date or date-time, exclusive (default: now)."),
        OpenApiParameter("limit", int, description="Records per page, 1 to 1000 (100)."),
        OpenApiParameter(
            "before_id", int, description="The next page: the previous page's `next_before_id`."
        ),
    ],
    responses={200: OpenApiResponse(response=ADMIN_USAGE, description="Newest first"), **_errors()},
)
alerts_get_schema = extend_schema(
    operation_id="admin_account_alerts_retrieve",
    summary="An account's alert settings" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    parameters=[_ACCOUNT_ID],
    responses={200: OpenApiResponse(response=ADMIN_ALERTS, description="The settings"), **_errors()},
)
alerts_set_schema = extend_schema(
    operation_id="admin_account_alerts_update",
    summary="Change an account's alert settings" + _SUMMARY_SUFFIX,
    tags=_TAGS,
    parameters=[_ACCOUNT_ID],
    request={"application/json": ADMIN_ALERTS_SET},
    responses={200: OpenApiResponse(response=ADMIN_ALERTS, description="The settings, changed"), **_errors()},
)
