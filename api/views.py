"""GET /v1/models, GET /v1/models/{id} and GET /v1/me: what the calling credential may use, and who
it acts for.

The model endpoints answer in OpenAI's shapes, or in Anthropic's (answers, pagination and errors)
when the caller sends an `anthropic-version` header, as Anthropic's SDKs always do."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import Account
from accounts.selectors import account_get_for_profile
from api.base import GatewayAPIView
from api.bodies import api_key_limits_body, budget_window_body, usage_totals_body
from api.catalog import ListedModel, model_get_for_credential, model_list_for_credential
from api.schema import me_schema, model_detail_schema, model_list_schema
from billing.models import Wallet
from billing.money import money_str
from billing.selectors import api_key_budget_window_get, usage_totals_get
from core.errors import INSUFFICIENT_SCOPE, MODEL_NOT_FOUND, InvalidRequest, NotFound, PermissionDenied, Shape
from groups.models import Group
from groups.snapshots import GroupSnapshot
from keys.credentials import Credential

SCOPE_PROFILE = "profile:read"
SCOPE_ACCOUNT = "account:read"
SCOPE_BALANCE = "account:balance:read"
ME_SCOPES = (SCOPE_PROFILE, SCOPE_ACCOUNT, SCOPE_BALANCE)
CURRENCY = "CNY"

ANTHROPIC_VERSION_HEADER = "anthropic-version"
# Anthropic's list pagination: `limit` defaults to 20 and may be 1 to 1000.
ANTHROPIC_PAGE_DEFAULT = 20
ANTHROPIC_PAGE_MAX = 1000


def _group_summary(group: Group | GroupSnapshot) -> dict[str, Any]:
    return {"id": group.pk, "name": group.name}


def _group_detail(group: Group) -> dict[str, Any]:
    return {
        "id": group.pk,
        "name": group.name,
        "status": group.status,
        "billing": group.billing,
        "image_enabled": group.image_enabled,
        "allow_group_override": group.allow_group_override,
    }


def _model_item(listed: ListedModel, *, with_group: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": listed.id,
        "object": "model",
        "created": int(listed.model.created.timestamp()),
        "owned_by": listed.group.name,
    }
    if with_group:
        item["group"] = _group_summary(listed.group)
        # False: an allowed group no request can select (`id` is then the plain model id).
        item["selectable"] = listed.selectable
    return item


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _anthropic_model_item(listed: ListedModel) -> dict[str, Any]:
    return {
        "type": "model",
        "id": listed.id,
        "display_name": listed.model.model_id,
        "created_at": _rfc3339(listed.model.created),
        # Only enabled models are listed; Anthropic's current SDKs read the field.
        "lifecycle": "active",
    }


def _shown(model_id: str) -> str:
    return model_id if len(model_id) <= 200 else model_id[:200] + "…"


def _page_limit(value: str | None) -> int:
    if value is None:
        return ANTHROPIC_PAGE_DEFAULT
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= ANTHROPIC_PAGE_MAX:
        raise InvalidRequest(
            f"limit must be a whole number from 1 to {ANTHROPIC_PAGE_MAX}, got {_shown(value)!r}.",
            param="limit",
        )
    return limit


def _cursor_index(ids: list[str], value: str, name: str) -> int:
    try:
        return ids.index(value)
    except ValueError:
        raise InvalidRequest(
            f"{name} {_shown(value)!r} is not the id of a model you may use; GET /v1/models lists them.",
            param=name,
        ) from None


def _anthropic_page(listed: list[ListedModel], params: Any) -> dict[str, Any]:
    """One page of the list in Anthropic's shape: `limit` items after `after_id`, or before
    `before_id` (then `has_more` says whether more come before it), else from the start."""
    limit = _page_limit(params.get("limit"))
    after_id, before_id = params.get("after_id") or None, params.get("before_id") or None
    if after_id is not None and before_id is not None:
        raise InvalidRequest("Send after_id or before_id, not both.", param="before_id")
    ids = [item.id for item in listed]
    if before_id is not None:
        end = _cursor_index(ids, before_id, "before_id")
        start = max(0, end - limit)
        page, has_more = listed[start:end], start > 0
    else:
        start = _cursor_index(ids, after_id, "after_id") + 1 if after_id is not None else 0
        page, has_more = listed[start : start + limit], start + limit < len(listed)
    return {
        "data": [_anthropic_model_item(item) for item in page],
        "has_more": has_more,
        "first_id": page[0].id if page else None,
        "last_id": page[-1].id if page else None,
    }


class ModelCatalogView(GatewayAPIView):
    """The model endpoints: OpenAI's shapes, or Anthropic's for a caller that sends
    `anthropic-version`, for the answer and for every error alike."""

    @property
    def anthropic(self) -> bool:
        return ANTHROPIC_VERSION_HEADER in self.request.headers

    def get_error_shape(self) -> Shape | None:
        return "native" if self.anthropic else super().get_error_shape()


class ModelListView(ModelCatalogView):
    """The models the credential may use, in the OpenAI list shape (or Anthropic's, paginated);
    `?groups=all` for OAuth tokens with `models:invoke` (every allowed group, each item marked
    `selectable`)."""

    @model_list_schema
    def get(self, request: Request) -> Response:
        credential = self.credential
        all_groups = request.query_params.get("groups") == "all" and credential.kind == "oauth"
        listed = model_list_for_credential(credential=credential, all_groups=all_groups)
        if self.anthropic:
            # Anthropic's model object has no place to say "not selectable": list what can be used.
            usable = [item for item in listed if item.selectable]
            return Response(_anthropic_page(usable, request.query_params))
        return Response(
            {"object": "list", "data": [_model_item(item, with_group=all_groups) for item in listed]}
        )


class ModelDetailView(ModelCatalogView):
    """One model the credential may use, by the id GET /v1/models lists it under; 404 otherwise."""

    @model_detail_schema
    def get(self, request: Request, model_id: str) -> Response:
        listed = model_get_for_credential(credential=self.credential, model_id=model_id)
        if listed is None:
            raise NotFound(
                f"The model {_shown(model_id)!r} does not exist or you may not use it; GET /v1/models "
                "lists the models you may use.",
                code=MODEL_NOT_FOUND,
                param="model",
            )
        if self.anthropic:
            return Response(_anthropic_model_item(listed))
        return Response(_model_item(listed, with_group=False))


def _credential_part(credential: Credential) -> dict[str, Any]:
    """What the credential is; an API key with its own limits and the spend of its budget window."""
    part: dict[str, Any] = {"type": credential.kind, "label": credential.label}
    if credential.kind == "api_key":
        part["group"] = _group_summary(credential.bound_group) if credential.bound_group else None
        limits = credential.limits
        part["limits"] = api_key_limits_body(limits)
        window = api_key_budget_window_get(
            api_key_id=credential.id, budget=limits.budget, budget_period=limits.budget_period
        )
        part["budget_window"] = None if window is None else budget_window_body(window)
    else:
        part["scopes"] = sorted(credential.scopes)
    return part


def _balance_part(account: Account) -> dict[str, Any]:
    try:
        wallet = account.wallet
        balance, held = wallet.balance, wallet.held
    except Wallet.DoesNotExist:
        balance = held = Decimal(0)
    return {
        "currency": CURRENCY,
        "balance": money_str(balance),
        "balance_held": money_str(held),
        "balance_available": money_str(balance - held),
    }


def _usage_part(account: Account) -> dict[str, Any]:
    periods = usage_totals_get(account_id=account.pk)
    return {
        "today": usage_totals_body(periods.today),
        "this_month": usage_totals_body(periods.this_month),
    }


class MeView(GatewayAPIView):
    """Who the credential acts for. Each part needs its scope; a manual API key sees everything."""

    @me_schema
    def get(self, request: Request) -> Response:
        credential = self.credential
        if not any(credential.has_scope(scope) for scope in ME_SCOPES):
            raise PermissionDenied(
                f"This token has none of the scopes /v1/me needs ({', '.join(ME_SCOPES)}).",
                code=INSUFFICIENT_SCOPE,
            )
        account = account_get_for_profile(account_id=credential.account.pk)
        body: dict[str, Any] = {"object": "me", "credential": _credential_part(credential)}
        if credential.has_scope(SCOPE_PROFILE):
            user = account.user
            body["user"] = {
                "id": user.pk,
                "username": user.get_username(),
                "email": user.email,
                "date_joined": user.date_joined.isoformat(),
            }
        if credential.has_scope(SCOPE_ACCOUNT):
            body["account"] = {"id": account.pk, "created_at": account.created_at.isoformat()}
            body["current_group"] = _group_detail(account.current_group) if account.current_group else None
            body["allowed_groups"] = [
                _group_detail(group) for group in sorted(account.allowed_groups.all(), key=lambda g: g.pk)
            ]
        if credential.has_scope(SCOPE_BALANCE):
            body.update(_balance_part(account))
            body["usage"] = _usage_part(account)
        return Response(body)
