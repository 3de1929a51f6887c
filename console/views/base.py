"""What every console page shares: a signed-in user with an account, rendered with the page's frame."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse_lazy
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache

from accounts.models import Account
from console import queries


@method_decorator(never_cache, name="dispatch")
class ConsoleView(LoginRequiredMixin, View):
    """A console page: a signed-in user with an account (self.account); nothing is cached."""

    login_url = reverse_lazy("login")
    section = ""
    account: Account

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        account = queries.account_for_user(user=request.user)
        if account is None:
            return render(request, "console/no_account.html", {"section": self.section}, status=403)
        self.account = account
        return super().dispatch(request, *args, **kwargs)

    def render(self, template: str, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
        base = {
            "account": self.account,
            "section": self.section,
            "gateway_timezone": settings.GATEWAY_TIMEZONE,
        }
        return render(self.request, template, {**base, **context}, status=status)
