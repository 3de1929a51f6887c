"""The alerts page: the account's thresholds, its webhook (the signing secret shown on request and
rotated there) and its recent notifications with how each delivery went."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from billing.money import money_trimmed
from console.forms import AlertSettingsForm
from console.views.base import ConsoleView
from notifications.errors import AlertSettingsInvalid
from notifications.selectors import notifications_recent
from notifications.services import (
    AlertSettingsInput,
    alert_percentages_parse,
    alert_settings_get,
    alert_settings_set,
    alert_webhook_secret_rotate,
)

# A secret made or rotated waits in the (server-side) session for the redirected GET, which shows it.
SECRET_SESSION = "console.webhook_secret"  # noqa: S105 - a session key


class AlertsView(ConsoleView):
    section = "alerts"

    def get(self, request: HttpRequest) -> HttpResponse:
        current = alert_settings_get(account=self.account)
        form = AlertSettingsForm(
            initial={
                "balance_floor": money_trimmed(current.balance_floor)
                if current.balance_floor is not None
                else "",
                "percentages": ", ".join(str(p) for p in current.percentages),
                "webhook_url": current.webhook_url,
                "email_enabled": current.email_enabled,
            }
        )
        return self._page(form=form, secret=request.session.pop(SECRET_SESSION, None))

    def post(self, request: HttpRequest) -> HttpResponse:
        action = request.POST.get("action", "save")
        if action == "reveal":
            current = alert_settings_get(account=self.account)
            if not current.webhook_secret:
                messages.info(request, "There is no signing secret yet: set a webhook URL first.")
                return redirect("console:alerts")
            request.session[SECRET_SESSION] = current.webhook_secret
            return redirect("console:alerts")
        if action == "rotate":
            request.session[SECRET_SESSION] = alert_webhook_secret_rotate(account=self.account)
            messages.success(request, "A new signing secret was made; the old one no longer signs.")
            return redirect("console:alerts")
        form = AlertSettingsForm(request.POST)
        if not form.is_valid():
            return self._page(form=form, status=400)
        data = form.cleaned_data
        try:
            floor_text = data["balance_floor"].strip().lstrip("¥")
            values = AlertSettingsInput(
                balance_floor=floor_text or None,
                percentages=alert_percentages_parse(text=data["percentages"]),
                webhook_url=data["webhook_url"],
                email_enabled=data["email_enabled"],
            )
            _, new_secret = alert_settings_set(account=self.account, values=values)
        except AlertSettingsInvalid as refused:
            form.add_error(refused.param, refused.message)
            return self._page(form=form, status=400)
        if new_secret:
            request.session[SECRET_SESSION] = new_secret
        messages.success(request, "Alert settings saved.")
        return redirect("console:alerts")

    def _page(self, *, form: AlertSettingsForm, status: int = 200, **extra: Any) -> HttpResponse:
        current = alert_settings_get(account=self.account)
        context = {
            "form": form,
            "settings_row": current,
            "notifications": notifications_recent(account_id=self.account.pk),
            "email_configured": bool(settings.EMAIL_HOST),
            **extra,
        }
        return self.render("console/alerts.html", context, status=status)
