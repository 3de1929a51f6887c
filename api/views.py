"""GET /v1/models and GET /v1/me: what the calling credential may use, and who it acts for."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import Account
from accounts.selectors import account_get_for_profile
from api.base import GatewayAPIView
from api.catalog import ListedModel, model_list_for_credential
from billing.models import Wallet
from billing.money import money_str
from billing.selectors import UsageTotals, usage_totals_get
from core.errors import INSUFFICIENT_SCOPE, PermissionDenied
from groups.models import Group
from groups.snapshots import GroupSnapshot
from keys.credentials import Credential

SCOPE_PROFILE = "profile:read"
SCOPE_ACCOUNT = "account:read"
SCOPE_BALANCE = "account:balance:read"
ME_SCOPES = (SCOPE_PROFILE, SCOPE_ACCOUNT, SCOPE_BALANCE)
CURRENCY = "CNY"


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
    return item


class ModelListView(GatewayAPIView):
    """The models the credential may use, in the OpenAI list shape; `?groups=all` for OAuth tokens."""

    def get(self, request: Request) -> Response:
        credential = self.credential
        all_groups = request.query_params.get("groups") == "all" and credential.kind == "oauth"
        listed = model_list_for_credential(credential=credential, all_groups=all_groups)
        return Response(
            {"object": "list", "data": [_model_item(item, with_group=all_groups) for item in listed]}
        )


def _credential_part(credential: Credential) -> dict[str, Any]:
    part: dict[str, Any] = {"type": credential.kind, "label": credential.label}
    if credential.kind == "api_key":
        part["group"] = _group_summary(credential.bound_group) if credential.bound_group else None
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


def _usage_totals(totals: UsageTotals) -> dict[str, Any]:
    return {
        "calls": totals.calls,
        "amount": money_str(totals.amount),
        "input_tokens": totals.input_tokens,
        "cached_tokens": totals.cached_tokens,
        "cache_write_tokens": totals.cache_write_tokens,
        "output_tokens": totals.output_tokens,
    }


def _usage_part(account: Account) -> dict[str, Any]:
    periods = usage_totals_get(account_id=account.pk)
    return {"today": _usage_totals(periods.today), "this_month": _usage_totals(periods.this_month)}


class MeView(GatewayAPIView):
    """Who the credential acts for. Each part needs its scope; a manual API key sees everything."""

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
