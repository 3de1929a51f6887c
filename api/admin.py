"""/v1/admin/...: the provisioning API for staff automation (docs/authentication.md, "Provisioning").

Thin views: the body is checked by its pydantic model (core/validation.py maps a refusal),
`keys.access.admin_provision_check` decides who may call, and the services of accounts, keys,
billing and notifications do the writes (and the audit log lines).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime, time, timedelta
from typing import Annotated, Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import Account, User
from accounts.services import AccountExists, AccountGroupInactive, account_create_with_groups
from api.admin_schema import (
    account_create_schema,
    alerts_get_schema,
    alerts_set_schema,
    key_create_schema,
    key_limits_schema,
    key_list_schema,
    key_revoke_schema,
    topup_schema,
    usage_schema,
)
from api.answers import StoredResponse, stored_response
from api.base import GatewayAPIView
from api.bodies import usage_totals_body
from api.idempotency import idempotent_answer
from billing.idempotency import idempotency_fingerprint
from billing.ledger import wallet_top_up
from billing.models import LedgerEntry, UsageRecord
from billing.money import MoneyError, money_parse, money_str
from billing.selectors import usage_records_page, usage_totals_between
from core.errors import Conflict, InvalidRequest, NotFound
from core.validation import RequestBody, body_validate, echo, json_type, refusal
from groups.models import Group
from keys.access import admin_provision_check
from keys.models import ApiKey
from keys.selectors import api_keys_list
from keys.services import (
    ApiKeyGroupNotAllowed,
    ApiKeyLimitsInput,
    api_key_create_by_staff,
    api_key_limits_clean,
    api_key_limits_set_by_staff,
    api_key_models_check,
    api_key_revoke_by_staff,
)
from notifications.models import AlertSettings
from notifications.services import AlertSettingsInput, alert_settings_get, alert_settings_set_by_staff

USAGE_PAGE_DEFAULT = 100
USAGE_PAGE_MAX = 1000
USAGE_DEFAULT_DAYS = 30

Body = TypeVar("Body", bound=RequestBody)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _valid(model: type[Body], data: Any) -> Body:
    """`data` validated by `model`. The provisioning API answers every refusal of a body with
    `invalid_value` (its answers since it was published), whatever the kind of refusal."""
    try:
        return body_validate(model, data)
    except InvalidRequest as refused:
        raise InvalidRequest(refused.message, param=refused.param, code="invalid_value") from None


def _group_get(ref: int | str, *, param: str) -> Group:
    """A group by id (a number) or name; 400 naming `param` when there is none."""
    lookup = Q(pk=int(ref)) if str(ref).isdigit() else Q(name=ref)
    group = Group.objects.filter(lookup).first()
    if group is None:
        raise InvalidRequest(f"There is no group {ref!r}.", param=param, code="group_not_found")
    return group


def _account_get(account_id: int) -> Account:
    account = Account.objects.select_related("user").filter(pk=account_id).first()
    if account is None:
        raise NotFound(f"There is no account {account_id}.", code="account_not_found")
    return account


def _group_ref(value: Any, info: ValidationInfo) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | str) or value == "":
        raise refusal(
            "invalid_value",
            f"`{info.field_name}` names a group by its id (an integer) or its name (a string); "
            f"got {json_type(value)} {echo(value)}".rstrip()
            + ".",
        )
    return value


# A group by its id or its name.
GroupRef = Annotated[int | str, BeforeValidator(_group_ref)]


class AdminBody(RequestBody):
    """The admin bodies' strings are read with surrounding whitespace removed."""

    model_config = ConfigDict(str_strip_whitespace=True)


class AccountCreateBody(AdminBody):
    username: str = Field(max_length=150, pattern=r"^[\w.@+-]+$")
    email: str = Field("", max_length=254)
    groups: list[GroupRef] = Field(default_factory=list, max_length=100)
    current_group: GroupRef | None = None

    @field_validator("email")
    @classmethod
    def _an_email_address(cls, email: str) -> str:
        if email:
            try:
                validate_email(email)
            except DjangoValidationError:
                raise refusal(
                    "invalid_value", f"`email` is not an email address; got {echo(email)}."
                ) from None
        return email


class KeyLimitsBody(AdminBody):
    """A key's own limits, each optional; their values are checked by keys.services'
    `api_key_limits_clean` (a refusal names the field), the models by `api_key_models_check`."""

    # A JSON string ("5.00"), parsed exactly: a JSON number may have passed through a float.
    budget: str | None = Field(None, max_length=40, description='a string such as "5.00"')
    budget_period: str | None = Field(None, max_length=16)
    models: list[str] | None = None
    rpm: int | None = None
    tpm: int | None = None
    allowed_ips: list[str] | None = None

    def limits(self, *, current: ApiKey | None = None, sent: Collection[str] = ()) -> ApiKeyLimitsInput:
        """The limits this body asks for. With `current` (a PATCH), a field not among `sent` keeps the
        key's value and a field sent as null is unset; unsetting the budget unsets its period too."""
        values: dict[str, Any] = {name: getattr(self, name) for name in LIMIT_FIELDS}
        if current is not None:
            kept = _key_limits(current)
            values = {name: values[name] if name in sent else kept[name] for name in LIMIT_FIELDS}
            if "budget" in sent and values["budget"] is None and "budget_period" not in sent:
                values["budget_period"] = None
        return ApiKeyLimitsInput(
            budget=values["budget"],
            budget_period=values["budget_period"] or "",
            model_ids=list(values["models"] or ()),
            rpm=values["rpm"],
            tpm=values["tpm"],
            allowed_ips=list(values["allowed_ips"] or ()),
        )


LIMIT_FIELDS = tuple(KeyLimitsBody.model_fields)


def _key_limits(api_key: ApiKey) -> dict[str, Any]:
    """A key's limits as the provisioning API names them; unset ones None (a budget as a string)."""
    return {
        "budget": money_str(api_key.budget) if api_key.budget is not None else None,
        "budget_period": api_key.budget_period or None,
        "models": list(api_key.model_ids),
        "rpm": api_key.rpm,
        "tpm": api_key.tpm,
        "allowed_ips": list(api_key.allowed_ips),
    }


def _limits_checked(limits: ApiKeyLimitsInput, *, group_id: int) -> ApiKeyLimitsInput:
    """`limits` once their values and models are checked (KeyLimitsInvalid naming the field)."""
    api_key_limits_clean(limits=limits)
    api_key_models_check(group_id=group_id, model_ids=limits.model_ids)
    return limits


class KeyCreateBody(KeyLimitsBody):
    group: GroupRef
    label: str = Field("", max_length=100)
    expires_at: datetime | None = None

    @field_validator("expires_at", mode="before")
    @classmethod
    def _iso_moment(cls, value: Any) -> datetime:
        """An ISO 8601 date-time string; without a zone, the gateway's."""
        moment = None
        if isinstance(value, str):
            try:
                moment = parse_datetime(value.strip())
            except ValueError:
                moment = None
        if moment is None:
            raise refusal("invalid_value", f"`expires_at` must be an ISO 8601 date-time; got {echo(value)}.")
        return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


class TopUpBody(AdminBody):
    # A JSON string ("10.00"), parsed exactly by money_parse: a JSON number may have passed through
    # a float.
    amount: str = Field(min_length=1, max_length=40, description='a string such as "10.00"')
    note: str = Field(min_length=1, max_length=1000)
    reference: str = Field("", max_length=200)


class AlertSettingsBody(AdminBody):
    """An account's alerts, each field optional: one not sent keeps its value. Their values are
    checked by notifications.services' `alert_settings_clean` (a refusal names the field)."""

    # A JSON string ("2.50"), parsed exactly; null: no floor.
    balance_floor: str | None = Field(None, max_length=40, description='a string such as "2.50"; null: none')
    percentages: list[int] = Field(default_factory=list, max_length=100)
    webhook_url: str = Field("", max_length=500)
    email_enabled: bool = True

    def values(self, *, current: AlertSettings, sent: Collection[str]) -> AlertSettingsInput:
        """The settings this body asks for, the current ones where a field is not among `sent`."""
        return AlertSettingsInput(
            balance_floor=self.balance_floor if "balance_floor" in sent else current.balance_floor,
            percentages=self.percentages if "percentages" in sent else list(current.percentages),
            webhook_url=self.webhook_url if "webhook_url" in sent else current.webhook_url,
            email_enabled=self.email_enabled if "email_enabled" in sent else current.email_enabled,
        )


def _alerts_body(account: Account, row: AlertSettings) -> dict[str, Any]:
    return {
        "object": "alert_settings",
        "account_id": account.pk,
        "balance_floor": money_str(row.balance_floor) if row.balance_floor is not None else None,
        "percentages": list(row.percentages),
        "webhook_url": row.webhook_url,
        "webhook_secret_set": bool(row.webhook_secret),
        "email_enabled": row.email_enabled,
    }


def _account_body(account: Account) -> dict[str, Any]:
    return {
        "object": "account",
        "id": account.pk,
        "username": account.user.get_username(),
        "email": account.user.email,
        "groups": sorted(account.allowed_groups.values_list("pk", flat=True)),
        "current_group": account.current_group_id,
        "created_at": _iso(account.created_at),
    }


def _key_body(api_key: ApiKey) -> dict[str, Any]:
    return {
        "object": "api_key",
        "id": api_key.pk,
        "account_id": api_key.account_id,
        "prefix": api_key.prefix,
        "label": api_key.label,
        "group": {"id": api_key.group_id, "name": api_key.group.name},
        "created_at": _iso(api_key.created_at),
        "last_used_at": _iso(api_key.last_used_at),
        "expires_at": _iso(api_key.expires_at),
        "revoked_at": _iso(api_key.revoked_at),
        "state": api_key.status,
        **_key_limits(api_key),
    }


def _entry_body(entry: LedgerEntry, *, account: Account, created_by: User) -> dict[str, Any]:
    return {
        "object": "ledger_entry",
        "id": entry.pk,
        "account_id": account.pk,
        "kind": entry.kind,
        "amount": money_str(entry.amount),
        "balance_after": money_str(entry.balance_after),
        "reference": entry.reference,
        "note": entry.note,
        "created_by": created_by.get_username(),
        "created_at": _iso(entry.created_at),
    }


def _record_body(record: UsageRecord) -> dict[str, Any]:
    return {
        "id": record.pk,
        "request_id": record.request_id,
        "created_at": _iso(record.created_at),
        "credential": record.credential,
        "group_id": record.group_id,
        "model": record.model_id,
        "endpoint": record.endpoint,
        "billing": record.billing,
        "status": record.status,
        "error_code": record.error_code,
        "amount": money_str(record.amount),
        "input_tokens": record.input_tokens,
        "cached_tokens": record.cached_tokens,
        "cache_write_tokens": record.cache_write_tokens,
        "output_tokens": record.output_tokens,
        "latency_ms": record.latency_ms,
    }


def _moment(value: str | None, *, param: str) -> datetime | None:
    """An ISO 8601 date-time (no zone: the gateway's) or date (its midnight, the gateway's zone)."""
    if not value:
        return None
    try:
        moment = parse_datetime(value)
        if moment is None and (day := parse_date(value)) is not None:
            moment = datetime.combine(day, time.min)
    except ValueError:
        moment = None
    if moment is None:
        raise InvalidRequest(
            f"{param} must be an ISO 8601 date or date-time, got {value[:60]!r}.",
            param=param,
            code="invalid_value",
        )
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def _whole(value: str | None, *, param: str, low: int, high: int, default: int | None) -> int | None:
    if value is None:
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise InvalidRequest(
            f"{param} must be a whole number from {low} to {high}.", param=param, code="invalid_value"
        )
    return int(value)


class AdminAPIView(GatewayAPIView):
    """A staff credential required (keys.access.admin_provision_check); `self.staff` is its user."""

    error_shape = "compatible"

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.staff = admin_provision_check(credential=self.credential)


class AdminAccountCreateView(AdminAPIView):
    @account_create_schema
    def post(self, request: Request) -> Response:
        body = _valid(AccountCreateBody, request.data)
        groups = [_group_get(ref, param="groups") for ref in body.groups]
        current = body.current_group
        current_group = _group_get(current, param="current_group") if current is not None else None
        if current_group is None and groups:
            current_group = groups[0]
        if current_group is not None and current_group.pk not in {group.pk for group in groups}:
            raise InvalidRequest(
                "current_group must be one of groups.", param="current_group", code="invalid_value"
            )
        try:
            account = account_create_with_groups(
                staff=self.staff,
                username=body.username,
                email=body.email,
                groups=groups,
                current_group=current_group,
            )
        except AccountExists:
            raise Conflict(
                f"The username {body.username!r} is taken.", param="username", code="username_taken"
            ) from None
        except AccountGroupInactive as refused:
            raise InvalidRequest(
                f"The group {refused.group.name!r} is {refused.group.get_status_display().lower()}: "
                "accounts are opened in active groups only.",
                param="groups",
                code="group_inactive",
            ) from None
        return Response(_account_body(account), status=201)


class AdminAccountKeysView(AdminAPIView):
    @key_list_schema
    def get(self, request: Request, account_id: int) -> Response:
        account = _account_get(account_id)
        keys = list(api_keys_list(account=account))
        return Response({"object": "list", "data": [_key_body(api_key) for api_key in keys]})

    @key_create_schema
    def post(self, request: Request, account_id: int) -> Response:
        account = _account_get(account_id)
        body = _valid(KeyCreateBody, request.data)
        group = _group_get(body.group, param="group")
        if body.expires_at is not None and body.expires_at <= timezone.now():
            raise InvalidRequest("expires_at must be in the future.", param="expires_at")
        limits = _limits_checked(body.limits(), group_id=group.pk)
        try:
            api_key, secret = api_key_create_by_staff(
                staff=self.staff,
                account=account,
                group=group,
                label=body.label,
                expires_at=body.expires_at,
                limits=limits,
            )
        except ApiKeyGroupNotAllowed as exc:
            raise InvalidRequest(
                f"The key cannot be made: {exc}.", param="group", code="group_not_allowed"
            ) from None
        # The secret is in this answer only: only its HMAC is stored.
        return Response({**_key_body(api_key), "key": secret}, status=201)


class AdminAlertSettingsView(AdminAPIView):
    @alerts_get_schema
    def get(self, request: Request, account_id: int) -> Response:
        account = _account_get(account_id)
        return Response(_alerts_body(account, alert_settings_get(account=account)))

    @alerts_set_schema
    def patch(self, request: Request, account_id: int) -> Response:
        account = _account_get(account_id)
        body = _valid(AlertSettingsBody, request.data)
        sent = frozenset(request.data)  # a dict: the body validated as an object
        values = body.values(current=alert_settings_get(account=account), sent=sent)
        row, secret = alert_settings_set_by_staff(staff=self.staff, account=account, values=values)
        answer = _alerts_body(account, row)
        # A secret made now (a URL set where there was none) is in this answer only.
        return Response({**answer, "webhook_secret": secret} if secret is not None else answer)


def _api_key_get(key_id: int) -> ApiKey:
    api_key = ApiKey.objects.select_related("group").filter(pk=key_id).first()
    if api_key is None:
        raise NotFound(f"There is no API key {key_id}.", code="api_key_not_found")
    return api_key


class AdminKeyView(AdminAPIView):
    @key_limits_schema
    def patch(self, request: Request, key_id: int) -> Response:
        api_key = _api_key_get(key_id)
        body = _valid(KeyLimitsBody, request.data)
        sent = frozenset(request.data)  # a dict: the body validated as an object
        limits = _limits_checked(body.limits(current=api_key, sent=sent), group_id=api_key.group_id)
        api_key_limits_set_by_staff(staff=self.staff, api_key=api_key, limits=limits)
        return Response(_key_body(api_key))


class AdminKeyRevokeView(AdminAPIView):
    @key_revoke_schema
    def post(self, request: Request, key_id: int) -> Response:
        api_key = _api_key_get(key_id)
        revoked = api_key_revoke_by_staff(staff=self.staff, api_key=api_key)
        return Response({**_key_body(api_key), "revoked": revoked})


class AdminTopUpView(AdminAPIView):
    @topup_schema
    def post(self, request: Request, account_id: int) -> Any:
        account = _account_get(account_id)
        body = _valid(TopUpBody, request.data)
        try:
            amount = money_parse(body.amount, allow_zero=False)
        except MoneyError as exc:
            raise InvalidRequest(f"amount: {exc}", param="amount", code="invalid_amount") from None
        staff = self.staff

        def produce() -> StoredResponse:
            # With a key, the entry and the key's completion commit together (in_transaction below):
            # a process killed between them leaves neither, and a retry tops up once.
            entry = wallet_top_up(
                account=account,
                amount=amount,
                note=body.note,
                reference=body.reference,
                created_by=staff,
            )
            answer = _entry_body(entry, account=account, created_by=staff)
            return StoredResponse(
                status=201, body=json.dumps(answer).encode(), content_type="application/json"
            )

        key = request.headers.get("Idempotency-Key")
        stored = idempotent_answer(
            account=self.credential.account,  # keys are the calling staff member's
            key=key,
            fingerprint=(
                idempotency_fingerprint(
                    parts=(
                        b"POST",
                        request.path.encode(),
                        json.dumps(body.model_dump(), sort_keys=True).encode(),
                    )
                )
                if key is not None
                else ""
            ),
            reference=getattr(request, "request_id", ""),
            produce=produce,
            in_transaction=True,
        )
        return stored_response(stored)


class AdminUsageView(AdminAPIView):
    @usage_schema
    def get(self, request: Request, account_id: int) -> Response:
        account = _account_get(account_id)
        params = request.query_params
        end = _moment(params.get("to"), param="to") or timezone.now()
        start = _moment(params.get("from"), param="from") or end - timedelta(days=USAGE_DEFAULT_DAYS)
        if start >= end:
            raise InvalidRequest("from must be before to.", param="from", code="invalid_value")
        limit = _whole(
            params.get("limit"), param="limit", low=1, high=USAGE_PAGE_MAX, default=USAGE_PAGE_DEFAULT
        )
        before_id = _whole(params.get("before_id"), param="before_id", low=1, high=2**63 - 1, default=None)
        records, has_more = usage_records_page(
            account_id=account.pk, start=start, end=end, limit=limit, before_id=before_id
        )
        totals = usage_totals_between(account_id=account.pk, start=start, end=end)
        return Response(
            {
                "object": "usage",
                "account_id": account.pk,
                "from": start.isoformat(),
                "to": end.isoformat(),
                "totals": usage_totals_body(totals),
                "data": [_record_body(record) for record in records],
                "has_more": has_more,
                "next_before_id": records[-1].pk if has_more else None,
            }
        )
