from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from core.admin_confirm import admin_action_confirmed
from keys.models import ApiKey
from keys.services import api_key_create, api_key_revoke


class ApiKeyAdminForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ("account", "group", "label", "expires_at")

    def clean(self):
        cleaned = super().clean()
        account, group = cleaned.get("account"), cleaned.get("group")
        # New keys only (owner and group are read-only afterwards): api_key_create refuses a group the
        # account may not use; say so on the form rather than fail in save_model.
        is_new = self.instance.pk is None and account is not None and group is not None
        if is_new and not account.allowed_groups.filter(pk=group.pk).exists():
            self.add_error("group", f"{account} may not use the group {group.name!r}; allow it first.")
        return cleaned


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
    fields = ("account", "group", "label", "expires_at", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")

    @admin.display(description="Status")
    def key_status(self, obj: ApiKey) -> str:
        return obj.status

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
