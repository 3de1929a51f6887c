import re

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from billing.selectors import api_key_budget_window_get, key_budget_window_summary
from core.admin_confirm import admin_action_confirmed
from keys.errors import KeyLimitsInvalid
from keys.models import ApiKey
from keys.services import (
    ApiKeyLimitsInput,
    api_key_create,
    api_key_limits_clean,
    api_key_models_check,
    api_key_revoke,
)

LIST_HELP = "One per line, or separated by commas; empty: "


def _listed(text: str) -> list[str]:
    return [item for item in re.split(r"[\s,]+", text or "") if item]


class ApiKeyAdminForm(forms.ModelForm):
    """The key's fields and its own limits; the limits are checked by keys.services'
    `api_key_limits_clean` and `api_key_models_check`, a refusal shown on its field."""

    # The two lists are edited as text (a line or a comma between items) and stored as lists.
    models = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=LIST_HELP + "every model of the key's group.",
    )
    allowed_ips = forms.CharField(
        label="Allowed IPs",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=LIST_HELP + "any address. CIDR networks (10.0.0.0/8) or single addresses.",
    )

    limits: ApiKeyLimitsInput  # the limits given, once `clean` accepted them

    class Meta:
        model = ApiKey
        fields = ("account", "group", "label", "expires_at", "budget", "budget_period", "rpm", "tpm")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None and not self.is_bound:
            self.initial["models"] = "\n".join(self.instance.model_ids)
            self.initial["allowed_ips"] = "\n".join(self.instance.allowed_ips)

    def clean(self):
        cleaned = super().clean()
        account, group = cleaned.get("account"), cleaned.get("group")
        # New keys only (owner and group are read-only afterwards): api_key_create refuses a group the
        # account may not use; say so on the form rather than fail in save_model.
        is_new = self.instance.pk is None and account is not None and group is not None
        if is_new and not account.allowed_groups.filter(pk=group.pk).exists():
            self.add_error("group", f"{account} may not use the group {group.name!r}; allow it first.")
        if self.errors:
            return cleaned
        limits = self._limits_given()
        try:
            values = api_key_limits_clean(limits=limits)
            group_id = group.pk if group is not None else self.instance.group_id
            api_key_models_check(group_id=group_id, model_ids=values["model_ids"])
        except KeyLimitsInvalid as refused:
            self.add_error(refused.param if refused.param in self.fields else None, refused.message)
            return cleaned
        # The stored values are the cleaned ones (the lists canonical and sorted); the admin's form
        # also carries `allowed_ips` onto the model's column of that name.
        self.instance.model_ids = values["model_ids"]
        cleaned.update(budget_period=values["budget_period"], allowed_ips=values["allowed_ips"])
        self.limits = limits
        return cleaned

    def _limits_given(self) -> ApiKeyLimitsInput:
        data = self.cleaned_data
        return ApiKeyLimitsInput(
            budget=data.get("budget"),
            budget_period=data.get("budget_period") or "",
            model_ids=_listed(data.get("models", "")),
            rpm=data.get("rpm"),
            tpm=data.get("tpm"),
            allowed_ips=_listed(data.get("allowed_ips", "")),
        )


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyAdminForm
    list_display = (
        "prefix",
        "label",
        "account",
        "group",
        "key_status",
        "created_at",
        "last_used_at",
        "expires_at",
    )
    list_filter = ("group", "revoked_at", "expires_at")
    search_fields = ("prefix", "label", "account__user__username")
    list_select_related = ("account__user", "group")
    actions = ("revoke_keys",)
    fieldsets = (
        (None, {"fields": ("account", "group", "label", "expires_at")}),
        (
            "Limits (each optional: unset, only the account's and the group's apply)",
            {
                "fields": (
                    ("budget", "budget_period"),
                    "budget_window",
                    "models",
                    ("rpm", "tpm"),
                    "allowed_ips",
                )
            },
        ),
        (None, {"fields": ("prefix", "created_at", "last_used_at", "revoked_at")}),
    )
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at", "budget_window")

    @admin.display(description="Status")
    def key_status(self, obj: ApiKey) -> str:
        return obj.status

    @admin.display(description="Spent this window")
    def budget_window(self, obj: ApiKey) -> str:
        """The key's spend in its current budget window (calls in flight included)."""
        window = (
            api_key_budget_window_get(api_key_id=obj.pk, budget=obj.budget, budget_period=obj.budget_period)
            if obj.pk is not None
            else None
        )
        return key_budget_window_summary(window) if window is not None else "No budget."

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            # A key's owner and group are fixed at creation: make a new key instead.
            return (*self.readonly_fields, "account", "group")
        return self.readonly_fields

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        api_key, secret = api_key_create(
            account=form.cleaned_data["account"],
            group=form.cleaned_data["group"],
            label=form.cleaned_data.get("label", ""),
            expires_at=form.cleaned_data.get("expires_at"),
            limits=form.limits,
        )
        for f in ApiKey._meta.concrete_fields:
            setattr(obj, f.attname, getattr(api_key, f.attname))
        messages.warning(
            request,
            format_html("New key (shown once, copy it now): <code>{}</code>", secret),
        )

    @admin.action(description="Revoke selected keys…")
    def revoke_keys(self, request, queryset):
        return admin_action_confirmed(
            model_admin=self,
            request=request,
            queryset=queryset,
            action="revoke_keys",
            title="Revoke API keys",
            consequence="Every call made with these keys fails with 401 from now on. This cannot be undone.",
            perform=lambda keys: f"Revoked {sum(api_key_revoke(api_key=key) for key in keys)} key(s).",
        )
