from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db import models
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from accounts.models import User
from billing.holds import holds_release_stale
from billing.ledger import wallet_adjust, wallet_top_up
from billing.models import (
    Hold,
    IdempotencyRecord,
    LedgerEntry,
    Subscription,
    SubscriptionUsage,
    UsageRecord,
    Wallet,
)
from billing.money import MoneyError, money_display, money_parse, money_trimmed
from core.admin_confirm import admin_action_confirmed


class MoneyMovementForm(forms.Form):
    amount = forms.CharField()
    note = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)

    def __init__(self, *args: Any, allow_negative: bool, note_required: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allow_negative = allow_negative
        self.fields["amount"].help_text = (
            "¥, e.g. 10.00 to credit or -10.00 to debit." if allow_negative else "¥ to credit, e.g. 10.00."
        )
        self.fields["note"].required = note_required

    def clean_amount(self) -> Decimal:
        try:
            return money_parse(
                self.cleaned_data["amount"], allow_negative=self.allow_negative, allow_zero=False
            )
        except MoneyError as exc:
            raise forms.ValidationError(str(exc)) from None


class MoneyFormField(forms.DecimalField):
    """An editable amount offered trimmed ("1.50", not the column's "1.50000000")."""

    def prepare_value(self, value: Any) -> Any:
        return money_trimmed(value) if isinstance(value, Decimal) else value


class MoneyShownAdmin(admin.ModelAdmin[Any]):
    """Shows the money columns named in `money_fields` as people read them (¥33.08, ¥0.000024,
    billing.money.money_display), in the list and wherever they are read-only, instead of the column's
    eight fixed places; editable ones are offered trimmed. Each column `x` is shown by a generated
    `x_shown`, which takes the place of `x` in the list and among the read-only fields."""

    money_fields: tuple[str, ...] = ()

    def __init__(self, model: type[Model], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        for name in self.money_fields:
            field = model._meta.get_field(name)
            assert isinstance(field, models.DecimalField), f"{name} is not a money column"
            setattr(self, f"{name}_shown", self._money_column(field))

    def _money_column(self, field: models.DecimalField[Any, Any]) -> Any:
        @admin.display(description=field.verbose_name, ordering=field.name)
        def shown(obj: Model) -> str:
            value = getattr(obj, field.name)
            return self.get_empty_value_display() if value is None else money_display(value)

        return shown

    def _shown(self, names: Sequence[Any]) -> list[Any]:
        return [f"{name}_shown" if name in self.money_fields else name for name in names]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return self._shown(super().get_list_display(request))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return self._shown(super().get_readonly_fields(request, obj))

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        # A read-only money column is shown by its `_shown` twin; keep the column out of the form.
        raw = [name for name in super().get_readonly_fields(request, obj) if name in self.money_fields]
        return [*(super().get_exclude(request, obj) or ()), *raw]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any] | tuple[Any, ...]:
        fields = super().get_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            return self._shown(fields)  # a view-only page: every field is read-only
        return fields

    def formfield_for_dbfield(
        self, db_field: models.Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        if db_field.name in self.money_fields:
            kwargs.setdefault("form_class", MoneyFormField)
        return super().formfield_for_dbfield(db_field, request, **kwargs)


@admin.register(Wallet)
class WalletAdmin(MoneyShownAdmin):
    money_fields = ("balance", "held")
    list_display = ("account", "balance", "held", "available_amount", "updated_at")
    search_fields = ("account__user__username", "account__user__email")
    list_select_related = ("account__user",)
    readonly_fields = ("account", "balance", "held", "updated_at")
    actions = ("top_up", "adjust")

    @admin.display(description="Available")
    def available_amount(self, obj: Wallet) -> str:
        return money_display(obj.available)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # wallets are created with their account

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Top up selected wallets…")
    def top_up(self, request: HttpRequest, queryset: QuerySet[Wallet]) -> TemplateResponse | None:
        return self._money_action(
            request,
            queryset,
            action="top_up",
            title="Top up wallets",
            allow_negative=False,
            note_required=False,
        )

    @admin.action(description="Adjust selected wallets…")
    def adjust(self, request: HttpRequest, queryset: QuerySet[Wallet]) -> TemplateResponse | None:
        return self._money_action(
            request,
            queryset,
            action="adjust",
            title="Adjust wallets",
            allow_negative=True,
            note_required=True,
        )

    def _money_action(
        self,
        request: HttpRequest,
        queryset: QuerySet[Wallet],
        *,
        action: str,
        title: str,
        allow_negative: bool,
        note_required: bool,
    ) -> TemplateResponse | None:
        """Ask for amount and note on a confirmation page; on confirm, write one ledger entry per wallet."""
        if "apply" in request.POST:
            form = MoneyMovementForm(request.POST, allow_negative=allow_negative, note_required=note_required)
            if form.is_valid():
                amount, note = form.cleaned_data["amount"], form.cleaned_data["note"]
                done, failures = 0, []
                staff = request.user if isinstance(request.user, User) else None
                for wallet in queryset.select_related("account"):
                    try:
                        if action == "top_up":
                            wallet_top_up(
                                account=wallet.account,
                                amount=amount,
                                note=note,
                                reference="admin:top-up",
                                created_by=staff,
                            )
                        else:
                            wallet_adjust(
                                account=wallet.account,
                                amount=amount,
                                note=note,
                                reference="admin:adjustment",
                                created_by=staff,
                            )
                        done += 1
                    except MoneyError as exc:
                        failures.append(f"{wallet.account}: {exc}")
                if done:
                    # Some wallets moved: back to the list, which says what was written and what not
                    # (the form again could write the others twice).
                    for failure in failures:
                        self.message_user(request, failure, messages.ERROR)
                    self.message_user(
                        request,
                        f"{title}: {money_display(amount)} written to {done} wallet(s).",
                        messages.SUCCESS,
                    )
                    return None
                # Nothing was written: the same form again, with the input kept and the reasons on it.
                for failure in failures:
                    form.add_error("amount", failure)
        else:
            form = MoneyMovementForm(allow_negative=allow_negative, note_required=note_required)
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "form": form,
            "wallets": [
                (wallet, money_display(wallet.balance), money_display(wallet.held))
                for wallet in queryset.select_related("account__user")
            ],
            "action": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/billing/wallet/money_action.html", context)


class ReadOnlyAdmin(MoneyShownAdmin):
    """Rows written only by billing services: staff read them, never edit them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    """Append-only: staff read the ledger; entries are written only by billing services."""

    money_fields = ("amount", "balance_after")

    list_display = (
        "id",
        "wallet",
        "kind",
        "amount",
        "balance_after",
        "reference",
        "created_by",
        "created_at",
    )
    list_filter = ("kind", "created_at")
    search_fields = ("reference", "note", "wallet__account__user__username")
    list_select_related = ("wallet__account__user", "created_by")
    date_hierarchy = "created_at"


@admin.register(Subscription)
class SubscriptionAdmin(MoneyShownAdmin):
    money_fields = ("daily_limit", "weekly_limit", "monthly_limit", "total_limit")
    list_display = (
        "account",
        "group",
        "daily_limit",
        "weekly_limit",
        "monthly_limit",
        "total_limit",
        "model_ids",
        "starts_at",
        "expires_at",
    )
    list_filter = ("group", "expires_at")
    search_fields = ("account__user__username",)
    list_select_related = ("account__user", "group")


@admin.register(Hold)
class HoldAdmin(ReadOnlyAdmin):
    money_fields = ("amount", "captured_amount")
    list_display = (
        "id",
        "kind",
        "wallet",
        "subscription",
        "amount",
        "captured_amount",
        "status",
        "reference",
        "expires_at",
    )
    list_filter = ("status", "kind", "created_at")
    search_fields = ("reference",)
    list_select_related = ("wallet__account__user", "subscription__account__user", "subscription__group")
    date_hierarchy = "created_at"
    actions = ("release_stale",)

    @admin.action(description="Release stale holds (expired ones among the selected)…")
    def release_stale(self, request: HttpRequest, queryset: QuerySet[Hold]) -> TemplateResponse | None:
        return admin_action_confirmed(
            model_admin=self,
            request=request,
            queryset=queryset,
            action="release_stale",
            title="Release stale holds",
            consequence="Expired holds among these give their money or quota back; their calls are never "
            "charged. Holds that have not expired are left alone.",
            perform=lambda holds: (
                f"Released {holds_release_stale(hold_ids=holds.values_list('pk', flat=True))} stale hold(s)."
            ),
        )

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # The action releases money reservations: offered to staff who may change holds' wallets.
        actions = super().get_actions(request)
        if not request.user.has_perm("billing.change_wallet"):
            actions.pop("release_stale", None)
        return actions


@admin.register(SubscriptionUsage)
class SubscriptionUsageAdmin(ReadOnlyAdmin):
    money_fields = ("used",)
    list_display = ("subscription", "window", "window_start", "used", "updated_at")
    list_filter = ("window", "subscription__group")
    search_fields = ("subscription__account__user__username",)
    list_select_related = ("subscription__account__user", "subscription__group")


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    money_fields = ("amount",)
    list_display = (
        "created_at",
        "request_id",
        "account",
        "credential",
        "group",
        "model_id",
        "endpoint",
        "status",
        "error_code",
        "amount",
        "input_tokens",
        "cached_tokens",
        "cache_write_tokens",
        "output_tokens",
        "upstream",
        "latency_ms",
    )
    list_filter = ("status", "model_id", "endpoint", "billing", "group", "account")
    search_fields = ("request_id", "credential", "account__user__username", "error_code")
    list_select_related = ("account__user", "group")
    date_hierarchy = "created_at"
    show_full_result_count = False  # a COUNT(*) over the whole log on every page is slow


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ("account", "key", "status", "response_status", "created_at", "expires_at")
    list_filter = ("status",)
    search_fields = ("key", "account__user__username")
    list_select_related = ("account__user",)
    exclude = ("response_body",)
