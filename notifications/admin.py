from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from notifications.errors import AlertSettingsInvalid
from notifications.models import AlertSettings, Notification
from notifications.signing import webhook_secret_generate
from notifications.targets import webhook_url_clean


class AlertSettingsAdminForm(forms.ModelForm[AlertSettings]):
    class Meta:
        model = AlertSettings
        fields = ["account", "balance_floor", "percentages", "webhook_url", "email_enabled"]

    def clean_webhook_url(self) -> str:
        """The same request-forgery rules as the console (upstreams/ssrf.py)."""
        try:
            return webhook_url_clean(url=self.cleaned_data.get("webhook_url") or "")
        except AlertSettingsInvalid as refused:
            raise forms.ValidationError(refused.message) from None

    def clean_percentages(self) -> list[int]:
        value = self.cleaned_data.get("percentages") or []
        if not isinstance(value, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 100 for p in value
        ):
            raise forms.ValidationError("A list of whole percentages from 1 to 100, e.g. [80, 100].")
        return sorted(set(value))


@admin.register(AlertSettings)
class AlertSettingsAdmin(admin.ModelAdmin[AlertSettings]):
    form = AlertSettingsAdminForm
    list_display = ["account", "balance_floor", "percentages", "webhook_url", "email_enabled", "updated_at"]
    search_fields = ["account__user__username", "webhook_url"]
    readonly_fields = ["floor_epoch", "updated_at"]

    def save_model(self, request: HttpRequest, obj: AlertSettings, form: Any, change: bool) -> None:
        # A webhook gets its signing secret when its URL is set; the owner reads it in the console.
        if obj.webhook_url and not obj.webhook_secret:
            obj.webhook_secret = webhook_secret_generate()
        super().save_model(request, obj, form, change)


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin[Notification]):
    """The outbox, read-only: the worker alone changes an event's delivery."""

    list_display = [
        "event_id",
        "account",
        "kind",
        "subject",
        "threshold",
        "window",
        "status",
        "attempts",
        "created_at",
    ]
    list_filter = ["status", "kind"]
    search_fields = ["event_id", "account__user__username"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Notification | None = None) -> bool:
        return False
